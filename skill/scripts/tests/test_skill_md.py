"""SKILL.md tested against the code: its frontmatter, every attune command it writes, every path it names."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from conftest import REPO, SCRIPTS

from attune import cli

SKILL_DIR = SCRIPTS.parent
SKILL_MD = SKILL_DIR / "SKILL.md"
REFERENCES = sorted((SKILL_DIR / "references").glob("*.md"))

# The frontmatter keys Claude Code knows (claude_code.md §4, "Frontmatter reference").
FRONTMATTER_KEYS = {"name", "description", "when_to_use", "argument-hint", "arguments", "disable-model-invocation",
                    "user-invocable", "allowed-tools", "disallowed-tools", "model", "effort", "context", "agent",
                    "background", "hooks", "paths", "license", "compatibility", "metadata"}
FULL_FORM = "attune"  # the campaign's wrapper, first on the agent's PATH (the one command out of the sandbox)
SHELL_OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<"}
# Placeholders the document writes where a typed value goes, and a value of that type for parsing.
TYPED_PLACEHOLDERS = {"H": "0.5", "GPUH": "0.5", "S": "900", "N": "4096", "V": "32000"}
# Verbs the procedure must use: the loop cannot run without them.
LOOP_VERBS = {"status", "verify", "settings", "budget", "launch", "poll", "finalize", "rank", "candidate", "gate",
              "note", "lesson", "metrics", "profile", "topology", "teardown", "stop", "report", "rows"}


def _text(path):
    return path.read_text(encoding="utf-8")


def _frontmatter(text):
    lines = text.splitlines()
    assert lines and lines[0].strip() == "---", "SKILL.md must start with a --- line"
    end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    return yaml.safe_load("\n".join(lines[1:end])), "\n".join(lines[end + 1:])


def _fenced_lines(text):
    """Every line inside fenced code blocks, with backslash continuations joined."""
    out = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        out += [line.strip() for line in joined.splitlines() if line.strip()]
    return out


def _tokens(command):
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    tokens = []
    for token in lexer:
        if token in SHELL_OPERATORS:
            break
        tokens.append(token)
    return tokens


def _commands(text):
    """(line, argv after the program) for each attune command in the fenced blocks of ``text``: lines written
    ``attune VERB ...`` (the campaign's wrapper) or ``... attune.py VERB ...``."""
    found = []
    for line in _fenced_lines(text):
        for match in re.finditer(r"attune\.py\s+(.*)", line):
            found.append((line, _tokens(match.group(1))))
        if re.match(r"attune\s+[a-z]", line):
            found.append((line, _tokens(line[len("attune"):])))
    return found


def _subparsers():
    parser = cli.build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return parser, action.choices


def _check_command(line, argv):
    parser, subs = _subparsers()
    assert argv, "no verb in: %s" % line
    verb = argv[0]
    assert verb in cli.VERBS, "unknown verb %r in: %s" % (verb, line)
    sub = subs[verb]
    nested = next((a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction"), None)
    if nested is not None:  # rows build|sha|...: the subcommand comes first, and takes the options
        assert len(argv) > 1 and argv[1] in nested.choices, "%s needs one of %s first (in: %s)" % (
            verb, sorted(nested.choices), line)
        sub = nested.choices[argv[1]]
    options = {opt for action in sub._actions for opt in action.option_strings}
    for token in argv[1:]:
        if token == "--":  # what follows is kube exec's program and its own arguments
            break
        if token.startswith("--"):
            flag = token.split("=", 1)[0]
            assert flag in options, "%s does not take %s (in: %s); it takes %s" % (
                verb, flag, line, ", ".join(sorted(options)))
    choices = [a for a in sub._actions if not a.option_strings and a.choices and nested is None]
    if choices:  # candidate new, kube get|...: the action comes first
        assert len(argv) > 1 and argv[1] in choices[0].choices, "%s needs one of %s first (in: %s)" % (
            verb, sorted(choices[0].choices), line)
    values = [TYPED_PLACEHOLDERS.get(token, token) for token in argv]
    try:
        parser.parse_args(values)
    except SystemExit as exc:
        pytest.fail("argparse refuses (exit %s): %s" % (exc.code, line))


SKILL_TEXT = _text(SKILL_MD)
FRONT, BODY = _frontmatter(SKILL_TEXT)
SKILL_COMMANDS = _commands(SKILL_TEXT)
REFERENCE_COMMANDS = [(path.name, line, argv) for path in REFERENCES for line, argv in _commands(_text(path))]


def test_frontmatter_uses_only_claude_code_keys():
    assert isinstance(FRONT, dict)
    assert set(FRONT) <= FRONTMATTER_KEYS, sorted(set(FRONT) - FRONTMATTER_KEYS)
    assert FRONT["name"] == "attune"
    assert isinstance(FRONT["description"], str) and FRONT["description"].strip()
    listing = FRONT["description"] + FRONT.get("when_to_use", "")
    assert len(listing) <= 1536, "Claude Code truncates description + when_to_use at 1,536 characters"


def test_skill_is_a_procedure_of_reasonable_length():
    lines = SKILL_TEXT.count("\n")
    assert 250 <= lines <= 420, lines


def test_every_attune_command_is_written_in_full():
    assert len(SKILL_COMMANDS) >= 25, len(SKILL_COMMANDS)
    for line in _fenced_lines(SKILL_TEXT):
        assert "attune.py" not in line, "run the verbs as `attune VERB` (the wrapper that leaves the sandbox): %s" % line
        if re.search(r"(^|[\s;&|(])attune\s", line):
            assert line.startswith(FULL_FORM + " "), "`attune` runs only as the whole command: %s" % line
            tokens = shlex.split(line)
            assert not set(tokens) & SHELL_OPERATORS and "$(" not in line and "`" not in line, (
                "`attune` runs outside the sandbox only alone, with literal arguments: %s" % line)
        assert not line.startswith("alias "), line


@pytest.mark.parametrize("line,argv", SKILL_COMMANDS, ids=[" ".join(argv[:2]) for _, argv in SKILL_COMMANDS])
def test_skill_command_parses(line, argv):
    _check_command(line, argv)


def test_reference_commands_parse():
    """Any attune command a reference writes in a code block parses too (today they write none)."""
    for _name, line, argv in REFERENCE_COMMANDS:
        _check_command(line, argv)


def test_the_loop_uses_every_verb_it_needs():
    used = {argv[0] for _, argv in SKILL_COMMANDS}
    assert LOOP_VERBS <= used, sorted(LOOP_VERBS - used)
    pairs = {tuple(argv[:2]) for _, argv in SKILL_COMMANDS}
    for pair in (("candidate", "new"), ("launch", "--baseline"), ("launch", "--repeat-of")):
        assert pair in pairs, pair
    assert any("--confirm" in argv for _, argv in SKILL_COMMANDS if argv[0] == "launch")
    assert any("--json" in argv for _, argv in SKILL_COMMANDS if argv[0] == "status")


def test_skill_dir_paths_exist():
    paths = re.findall(r"\$\{CLAUDE_SKILL_DIR\}/([^\s\"'`)]+)", SKILL_TEXT)
    assert paths
    for rel in paths:
        assert (SKILL_DIR / rel.rstrip(".,;:")).exists(), "${CLAUDE_SKILL_DIR}/%s does not exist" % rel


def test_named_repository_paths_exist():
    named = re.findall(r"`((?:skill|references|scripts)/[^`\s]*)`", SKILL_TEXT)
    assert named
    for rel in named:
        rel = rel.rstrip(".,;:")
        base = REPO if rel.startswith("skill/") else SKILL_DIR
        assert (base / rel).exists(), "%s does not exist" % rel


def test_lever_ids_named_in_commands_are_in_the_catalog():
    catalog = set(re.findall(r"^## ([a-z0-9-]+)\s*$", _text(SKILL_DIR / "references" / "levers.md"), re.M))
    for line, argv in SKILL_COMMANDS:
        for i, token in enumerate(argv):
            if token == "--lever" and i + 1 < len(argv) and not argv[i + 1].isupper():
                assert argv[i + 1] in catalog, "lever %r is not in levers.md (in: %s)" % (argv[i + 1], line)


def test_the_state_contract_matches_the_guard():
    import sys
    sys.path.insert(0, str(REPO / "harness" / "hooks"))
    try:
        import campaign_files
    finally:
        sys.path.remove(str(REPO / "harness" / "hooks"))
    contract = BODY.split("## 0. The state contract", 1)[1].split("\n## ", 1)[0]
    for free in campaign_files.FREE:
        assert "`%s`" % free in contract, free
    for entry in campaign_files.PROTECTED:
        assert "`%s`" % entry in contract or "`%s`" % entry.rstrip("/") in contract or entry.endswith(".head"), entry
