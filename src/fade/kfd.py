"""What the kernel's KFD topology interface promises about the values it writes: shared by the collector that
validates a snapshot's KFD properties and the analysis that computes with them."""

KFD_PROPERTY_MAX = 2**64 - 1  # KFD writes its topology properties as unsigned 64-bit integers
