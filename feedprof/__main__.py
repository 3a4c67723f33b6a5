import sys

from feedprof.cli import main

sys.exit(main())
