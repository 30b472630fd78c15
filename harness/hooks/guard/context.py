"""What every part of the guard shares: its limits and markers, the two exceptions that end a check
(``Deny`` with the reason the agent sees, ``Unparsable`` for text the lexer cannot read), the
per-command context ``Ctx`` (campaign, settings, working directories, aliases, files written
earlier in the same command) and the quick scans for kubectl and protected names. It also loads
``campaign_files`` from the hooks folder; when that fails it leaves ``campaign_files`` None and the
reason in ``IMPORT_ERROR``, so the hook can still answer (deny) instead of crashing and failing open.
"""

import re

try:
    import campaign_files
    IMPORT_ERROR = None
except Exception as _exc:  # the guard must still answer (deny) rather than crash and fail open
    campaign_files = None
    IMPORT_ERROR = "%s: %s" % (type(_exc).__name__, _exc)


NOT_A_BOUNDARY = "the guard prevents accidents; it is not a security boundary"
MARK = "\x00"  # stands in a word for text the guard cannot know: a variable, a substitution, xargs input
MAX_DEPTH = 16
MAX_READ = 4 * 1024 * 1024
MAX_COMMAND = 1024 * 1024
FALSE = ("0", "false", "no", "off")
NOTES = "keep your own notes in notes.md or scratch/"


# program name -> the function that checks a call of it, and (pattern, function) for families of names (python3.11):
# each module registers its own checkers (``checker``) as it loads; ``dispatch`` loads them all before any check
# runs, and ``commands`` reads the registry, importing no later module
PROGRAMS = {}
PROGRAM_PATTERNS = []


def checker(*names, **pattern):
    """Register the decorated function as the checker of the programs ``names`` (and, with ``pattern=REGEX``, of
    every program name the pattern matches); a name registered twice is a mistake, refused as the package loads."""
    def register(check):
        for name in names:
            if name in PROGRAMS:
                raise ValueError("guard: program %r has two checkers" % name)
            PROGRAMS[name] = check
        if pattern.get("pattern"):
            PROGRAM_PATTERNS.append((re.compile(pattern["pattern"]), check))
        return check
    return register


class Deny(Exception):
    def __init__(self, reason):
        Exception.__init__(self, reason)
        self.reason = reason


class Unparsable(Exception):
    pass


# ------------------------------------------------------------------------------------------ context
class Ctx(object):
    def __init__(self, campaign, settings, cwd, text):
        self.campaign = campaign
        self.settings = settings
        self.event_cwd = cwd
        self.bases = [cwd]  # where relative paths may resolve (more than one after an unknown cd)
        self.root_text = text
        self.aliases = {}
        self.virtual = {}  # path -> text written earlier in this command (None: unknown text)
        self.expanding = set()

    def setting(self, name, default=""):
        value = self.settings.get(name)
        return default if value is None else value


def show(text):
    return text.replace(MARK, "${...}")


ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
GLOB_CHARS = re.compile(r"[*?\[]")


def mentions_kubectl(text):
    flat = re.sub(r"[\\'\"]", "", text).lower()
    return "kubectl" in flat or ("kube" in flat and "ctl" in flat)


def _mention_pattern():
    parts = []
    for entry in sorted(set(e.rstrip("/") for e in campaign_files.PROTECTED), key=len, reverse=True):
        if campaign_files.PROTECTED.count(entry + "/") and entry != ".attune":
            # a directory with a common name (runs): only as a path component
            parts.append(r"(?<![\w.-])%s(?=/)|['\"]%s['\"]" % (re.escape(entry), re.escape(entry)))
        else:
            parts.append(r"(?<![\w.-])%s(?![\w-])" % re.escape(entry))
    return re.compile("|".join(parts))


_MENTION = None


def mentions_protected(text):
    global _MENTION
    if _MENTION is None:
        _MENTION = _mention_pattern()
    return _MENTION.search(text)
