"""`python -m nmt_lib train|translate|evaluate`: the command-line tools of chapter 9
(`nmt_lib.run.cli`)."""

import sys

from nmt_lib.run.cli import main

sys.exit(main())
