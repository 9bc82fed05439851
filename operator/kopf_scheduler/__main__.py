import sys

from kopf_scheduler.cli import main

sys.exit(main())
