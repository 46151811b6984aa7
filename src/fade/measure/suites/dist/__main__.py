"""`python -m fade.measure.suites.dist REQUEST.json`: one rank under torchrun (rank.main). A separate entry
module, so that the case functions' `rank.current()` reads the same module the entry point filled."""

from fade.measure.suites.dist.rank import main

main()
