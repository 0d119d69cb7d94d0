import sys

from elical_hf.cli import main


sys.exit(main())
