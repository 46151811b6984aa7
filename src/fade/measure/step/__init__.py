"""The step-and-numerics core: a workload stepped under one knob configuration, checked against fp32, with
the process state it runs under pinned; shared by the model bench, the tuner's trials and the pre-tuner.

Modules, in the order a measurement uses them:
    config      StepConfig: one configuration in data/knobs.toml's knob names; the bench's variant names map onto it
    conditions  pinned_flags (fp32 math / TF32, cudnn.benchmark, MIOpen immediate; Inductor-safe), flags_in_effect,
                gc_frozen
    runner      apply_config, StepRunner (the step, the checked steps), fp32_reference, the seeds
    finite      FiniteTracker (the device-side finiteness sum of the timed steps), InvalidRun
    numerics    loss_check (with the GradScaler's skipped updates), check_training / check_inference / check

Nothing here imports torch at import time; the submodules import it where they use it.
"""
