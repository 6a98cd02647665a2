"""`python -m wakeful.devtools.emulator`: the emulator as a process."""

import sys

from wakeful.devtools.emulator.cli import main

sys.exit(main())
