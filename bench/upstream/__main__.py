from bench.upstream.cli import main

raise SystemExit(main())
