from vllm.cli import main

raise SystemExit(main())
