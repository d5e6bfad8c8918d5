"""`python -m gpu_rightsizer` is the same as the `gpu-rightsizer` command."""

import sys

from gpu_rightsizer.cli import main

sys.exit(main())
