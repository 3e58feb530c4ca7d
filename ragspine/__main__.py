from ragspine.cli import main

raise SystemExit(main())
