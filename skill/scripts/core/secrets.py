"""Where a user's credentials are, in one place: what the agent's sandbox and its file tools may not read
(``harness/sandbox.py``), and what a confined local run cannot see (``campaign/localrun.py``).

* ``HOME_SECRETS``: below HOME, kube configs, cloud and registry credentials, keys, tokens of the tools that hold
  them, and Claude Code's own settings and transcripts;
* ``SYSTEM_SECRETS``: the service-account token a pod mounts;
* the files and folders the environment names (``KUBECONFIG``, ``CLAUDE_CONFIG_DIR``, the cloud SDKs' credential
  files), and the integrity record's keys (``harness/integrity_key.py``: ``ATTUNE_KEY_DIR``, else
  ``$XDG_STATE_HOME/attune/keys``, else ``~/.local/state/attune/keys``);
* ``CREDENTIAL_VARS``: variables whose value is a credential;
* ``socket_paths``: where programs listen on Unix sockets that would act for the user (a terminal multiplexer's,
  an SSH agent's, a display's): a read-only mount still lets a program connect to a socket.

Standard library only (the harness reads it too).
"""

import glob
import os

HOME_SECRETS = (".kube", ".aws", ".azure", ".config/gcloud", ".docker", ".ssh", ".gnupg", ".netrc",
                ".git-credentials", ".config/gh", ".claude", ".claude.json", ".huggingface", ".cache/huggingface/token",
                ".config/huggingface", ".pypirc", ".local/state/attune")
SYSTEM_SECRETS = ("/var/run/secrets", "/run/secrets")
CREDENTIAL_VARS = ("KUBECONFIG", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
                   "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS",
                   "AZURE_CLIENT_SECRET", "GITHUB_TOKEN", "GH_TOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
                   "WANDB_API_KEY")
# variables that name a credential file or folder
PATH_VARS = ("KUBECONFIG", "CLAUDE_CONFIG_DIR", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
             "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "DOCKER_CONFIG", "ATTUNE_KEY_DIR")
SOCKET_GLOBS = ("/tmp/tmux-*", "/tmp/ssh-*", "/tmp/.X11-unix", "/tmp/.ICE-unix", "/tmp/screen*", "/tmp/emacs*")


def _unique(paths) -> list:
    out = []
    for path in paths:
        if path and path not in out:
            out.append(path)
    return out


def paths(env) -> list:
    """Absolute paths of the user's credentials (present or not) for the environment ``env``."""
    home = env.get("HOME") or os.path.expanduser("~")
    out = [os.path.join(home, rel) for rel in HOME_SECRETS]
    for name in PATH_VARS:
        for entry in (env.get(name) or "").split(os.pathsep):
            if entry:
                out.append(os.path.abspath(os.path.expanduser(entry)))
    state = env.get("XDG_STATE_HOME")
    if state and os.path.isabs(state):
        out.append(os.path.join(state, "attune"))
    out += list(SYSTEM_SECRETS)
    return _unique(out)


def socket_paths(env) -> list:
    """The folders of Unix sockets that act for the user, as they exist now."""
    out = []
    for pattern in SOCKET_GLOBS:
        out += sorted(glob.glob(pattern))
    agent = env.get("SSH_AUTH_SOCK")
    if agent and os.path.isabs(agent):
        out.append(os.path.dirname(agent))
    return _unique(out)
