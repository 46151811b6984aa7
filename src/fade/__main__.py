import sys

from fade.cli import main

sys.exit(main())
