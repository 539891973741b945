# For type checkers only. On the target, envguard/redact.py is installed as this module by
# probe/payload.py; envguard itself never imports the target package.
from envguard.redact import REDACTED as REDACTED
from envguard.redact import is_secret_name as is_secret_name
from envguard.redact import redact_argv as redact_argv
from envguard.redact import redact_text as redact_text
from envguard.redact import redact_url as redact_url
from envguard.redact import secret_digest as secret_digest
