"""What the tests share: helpers, fixtures' builders, components and tasks referenced by import
path from test specs (`support.faults:NaNAt`), and the module `python -m support.curves` runs
under torchrun. tests/ is on sys.path (pytest puts conftest.py's folder there; children get
it in PYTHONPATH from `support.backend_util.env`), so each is `support.<module>`."""
