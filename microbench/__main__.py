import sys

from microbench.cli import main

sys.exit(main())
