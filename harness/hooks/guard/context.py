"""What every part of the guard shares: its limits and markers, the two exceptions that end a check
(``_Deny`` with the reason the agent sees, ``_Unparsable`` for text the lexer cannot read), the
per-command context ``_Ctx`` (campaign, settings, working directories, aliases, files written
earlier in the same command) and the quick scans for kubectl and protected names. It also loads
``campaign_files`` from the hooks folder; when that fails it leaves ``campaign_files`` None and the
reason in ``_IMPORT_ERROR``, so the hook can still answer (deny) instead of crashing and failing open.
"""

import re

try:
    import campaign_files
    _IMPORT_ERROR = None
except Exception as _exc:  # the guard must still answer (deny) rather than crash and fail open
    campaign_files = None
    _IMPORT_ERROR = "%s: %s" % (type(_exc).__name__, _exc)


NOT_A_BOUNDARY = "the guard prevents accidents; it is not a security boundary"
MARK = "\x00"  # stands in a word for text the guard cannot know: a variable, a substitution, xargs input
MAX_DEPTH = 16
MAX_READ = 4 * 1024 * 1024
MAX_COMMAND = 1024 * 1024
_FALSE = ("0", "false", "no", "off")
_NOTES = "keep your own notes in notes.md or scratch/"


# program name -> the function that checks a call of it, and (pattern, function) for families of names (python3.11):
# filled by ``dispatch`` when the package loads (``guard/__init__``), read by ``commands``, which imports no later module
PROGRAMS = {}
PROGRAM_PATTERNS = []


class _Deny(Exception):
    def __init__(self, reason):
        Exception.__init__(self, reason)
        self.reason = reason


class _Unparsable(Exception):
    pass


# ------------------------------------------------------------------------------------------ context
class _Ctx(object):
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


def _show(text):
    return text.replace(MARK, "${...}")


_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")
_GLOB_CHARS = re.compile(r"[*?\[]")


def _mentions_kubectl(text):
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


def _mentions_protected(text):
    global _MENTION
    if _MENTION is None:
        _MENTION = _mention_pattern()
    return _MENTION.search(text)
