# For type checkers only. On the target, envguard/confine.py is installed as this module by
# probe/payload.py; envguard itself never imports the target package.
from envguard.confine import DIFF_ARGS as DIFF_ARGS
from envguard.confine import FILTER_QUERY as FILTER_QUERY
from envguard.confine import OUTSIDE as OUTSIDE
from envguard.confine import SAFE_GIT_ENV as SAFE_GIT_ENV
from envguard.confine import Roots as Roots
from envguard.confine import drivers_named as drivers_named
from envguard.confine import git_env as git_env
from envguard.confine import not_python as not_python
from envguard.confine import on_path as on_path
from envguard.confine import roots_for as roots_for
from envguard.confine import run_git as run_git
from envguard.confine import run_gits as run_gits
from envguard.confine import spawn_piped as spawn_piped
from envguard.confine import unsafe_place as unsafe_place
from envguard.confine import without_filters as without_filters
from envguard.confine import work_tree as work_tree
