"""`envguard guard`: an install previewed by its own installer's dry run, judged as drift
before it runs, refused or run and recorded; `history` and `undo` over those records.

command.py (what the install asks for), resolve.py (the dry run), preview.py (the
environment it would leave, as drift), install.py (running it), journal.py (the records),
report.py (the --format json documents).
"""
