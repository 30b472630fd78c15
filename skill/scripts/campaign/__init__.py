"""The campaign: its directory and ledger (``ledger``), runs and their backends, candidates, the ranking,
the budget, the pre-ship checks and the reports, over the kernel and the domain packages."""
