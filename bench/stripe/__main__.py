from bench.stripe.cli import main

raise SystemExit(main())
