"""Fixtures for the guard tests. CI has no GPU, so the accelerator is fade.hostwork.standin: see the docstring of
test_guard_dispatch.py for why that device, and not synthetic events, and what it leaves uncovered.

Registering the stand-in names torch's PrivateUse1 backend "standin" for the rest of this pytest process (torch
allows one name per process, with no way back). Nothing else in FADE asks torch for PrivateUse1 or
`torch.accelerator`, so other tests are unaffected; the registration happens only when a guard test runs.
"""

import pytest


@pytest.fixture(scope="session")
def device() -> str:
    from fade.hostwork import standin

    standin.register()
    return standin.NAME

