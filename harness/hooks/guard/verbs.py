"""The one command that leaves the sandbox: ``attune VERB ...``, alone, with literal arguments.

Claude Code runs a Bash call outside its sandbox when every command in it matches the campaign's
``excludedCommands`` (``attune:*``), looking through wrappers such as ``env``, ``timeout`` and
``nohup``; ``env VAR=... attune`` would then run outside with a variable of the agent's choosing. So
wherever ``attune`` is the program of a command (directly, behind a wrapper, in a substitution, a
pipe or a chain), the whole call must be exactly one invocation: the word ``attune`` written plainly,
then words that are literal text (quoted as needed), with no shell syntax around them (no ``;``,
``&``, ``|``, redirections, substitutions, variables, globs, braces, history or comments) and no
``--campaign`` other than this campaign. Anything else is denied with the rule, before the sandbox
would run it inside (where the verb cannot write its records).
"""

import os
import re
import shlex

from .context import Deny, checker
from .kubectl import check_kubectl

VERB = "attune"
_UNQUOTED_BAD = frozenset(";&|<>()$`\\\n\r*?[]{}!#")
_DQUOTE_BAD = frozenset("$`\\!")
_RULE = ("guard: `attune` runs outside the sandbox, so it must be the whole command: exactly one `attune VERB "
         "ARGS...` with literal arguments (quote them as needed), with no pipe, chain, redirection, substitution, "
         "variable, wrapper (env, timeout, nohup, bash -c, ...) or environment assignment around it. Run the verb "
         "alone and read its output from the result (its --json output is one object)")


def literal_problem(text):
    """Why ``text`` is not plain words of literal text (None when it is): the first shell construct found."""
    quote = None
    for index, char in enumerate(text):
        if quote == "'":
            if char == "'":
                quote = None
            continue
        if quote == '"':
            if char == '"':
                quote = None
            elif char in _DQUOTE_BAD:
                return "%r inside double quotes at character %d" % (char, index + 1)
            continue
        if char in "'\"":
            quote = char
        elif char in _UNQUOTED_BAD:
            return "%r at character %d" % (char, index + 1)
        elif char == "~" and (index == 0 or text[index - 1] in " \t"):
            return "a '~' expansion at character %d" % (index + 1)
    if quote:
        return "an unclosed %s quote" % quote
    return None


def strict_problem(command, campaign):
    """Why ``command`` is not one plain ``attune`` invocation on ``campaign`` (None when it is)."""
    text = command.strip(" \t")
    if not re.match(r"%s(?:[ \t]|\Z)" % VERB, text):
        return "the command does not start with the word %s" % VERB
    problem = literal_problem(text)
    if problem:
        return problem
    words = shlex.split(text)
    for index, word in enumerate(words):
        value = None
        if word == "--campaign" and index + 1 < len(words):
            value = words[index + 1]
        elif word.startswith("--campaign="):
            value = word.split("=", 1)[1]
        if value is not None and campaign and os.path.realpath(value) != os.path.realpath(campaign):
            return "--campaign %s is not this campaign (%s)" % (value, campaign)
    return None


@checker("attune")
def _attune(prog, args, env, stdin, ctx, depth):
    """``attune`` as the program of a command anywhere in the call: the whole call must be the strict form."""
    problem = strict_problem(ctx.root_text, ctx.campaign)
    if problem is None and (depth or env or prog != VERB):
        problem = "attune behind a wrapper, an assignment or a path"
    if problem is not None:
        raise Deny("%s (here: %s)." % (_RULE, problem))


_NO_CLUSTER = ("guard: kubectl cannot reach the cluster from the sandbox (no network). Inspect the campaign's own "
               "objects with `attune kube get|pods|events|logs RUN` and `attune kube exec RUN -- PROGRAM ARGS` (a "
               "read-only program in a run's pod; `log-pod` for the log pod), and launch, follow and stop runs with "
               "the run verbs.")


def kubectl_in_sandbox(check):
    """``check`` (the kubectl rules, whose denials name what is wrong), then a denial for what it would allow: from
    the sandbox no kubectl reaches the cluster, and the verbs are the way there."""
    def _kubectl(prog, args, env, stdin, ctx, depth):
        check(prog, args, env, stdin, ctx, depth)
        raise Deny(_NO_CLUSTER)
    return _kubectl


checker("kubectl", "kubectl.exe")(kubectl_in_sandbox(check_kubectl))
