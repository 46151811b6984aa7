"""The operator-coverage sweep: every OpInfo op × dtype on a device against the CPU, classified, and the
gap table between two such sweeps.
"""
