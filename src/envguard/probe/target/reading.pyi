# For type checkers only. On the target, envguard/reading.py is installed as this module by
# probe/payload.py; envguard itself never imports the target package.
from envguard.reading import DIGITS as DIGITS
from envguard.reading import METADATA_CAP as METADATA_CAP
from envguard.reading import RECORD_CAP as RECORD_CAP
from envguard.reading import SMALL_CAP as SMALL_CAP
from envguard.reading import UNSAFE_CHARS as UNSAFE_CHARS
from envguard.reading import WORD_CHARS as WORD_CHARS
from envguard.reading import NotRegular as NotRegular
from envguard.reading import Regex as Regex
from envguard.reading import dump_json as dump_json
from envguard.reading import envguard_cache as envguard_cache
from envguard.reading import escaped_line as escaped_line
from envguard.reading import escaped_name as escaped_name
from envguard.reading import named_by as named_by
from envguard.reading import not_json_constant as not_json_constant
from envguard.reading import open_regular as open_regular
from envguard.reading import parse_json as parse_json
from envguard.reading import read_bytes as read_bytes
from envguard.reading import read_open as read_open
from envguard.reading import read_text as read_text
from envguard.reading import report_line as report_line
from envguard.reading import write_all as write_all
