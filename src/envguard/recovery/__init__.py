"""Restoring an environment: the pure plan, its execution (the only code that installs),
and export to requirements.txt or pylock.toml."""
