"""`python -m nmt_lib train|translate|evaluate`: the command-line tools of chapter 9 (`nmt_lib.cli`)."""
import sys

from nmt_lib.cli import main

sys.exit(main())
