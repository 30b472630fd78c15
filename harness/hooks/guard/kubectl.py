"""kubectl rules: every invocation names the campaign's ``--context`` and ``-n``; no
``--kubeconfig``, ``-A``, ``config`` or node commands; changes only to objects named with the run
prefix (``-f`` manifests are read from files, directories and here-documents); exec, logs, cp,
attach, port-forward and debug only into the campaign's pods and the log pod.
"""

import os
import re

from .context import Deny, MARK, show, Unparsable
from .lexer import Word
from .paths import check_write, read_real, resolve_path
from .commands import kubeconfig_reason
from .manifest import ManifestError, parse_manifest


# --------------------------------------------------------------------------------------- kubectl
_K_LONG_VALUE = frozenset("""
context namespace kubeconfig cluster user server token as as-group as-uid username password certificate-authority
client-certificate client-key tls-server-name request-timeout cache-dir log-file log-dir log-file-max-size v vmodule
profile profile-output filename output selector field-selector container kustomize type patch patch-file image
replicas timeout for since since-time tail sort-by template grace-period field-manager overrides env port
target-port address limits requests labels restart subresource chunk-size raw from-file from-literal from-env-file
from docker-server docker-username docker-password docker-email cert key min max cpu-percent protocol name
session-affinity external-ip load-balancer-ip generator resource-version current-replicas to-revision revision
label-columns pod-running-timeout retries api-group verbs resource prune-allowlist prune-whitelist copy-to target
image-pull-policy custom serviceaccount role clusterrole group hostport schedule clusterip tcp node-name keys
limit-bytes max-log-requests output-directory annotations containers local-port
""".split())
_K_SHORT = {"n": "namespace", "f": "filename", "o": "output", "l": "selector", "c": "container", "k": "kustomize",
            "s": "server", "v": "v", "L": "label-columns", "A": "all-namespaces", "h": "help", "R": "recursive",
            "w": "watch", "i": "stdin", "t": "tty", "q": "quiet", "p": "previous"}
_K_IDENTITY = frozenset(("server", "cluster", "user", "token", "as", "as-group", "as-uid", "username", "password",
                         "certificate-authority", "client-certificate", "client-key"))
_K_READ = frozenset(("get", "describe", "top", "explain", "api-resources", "api-versions", "version", "wait", "events",
                     "diff", "cluster-info", "kustomize", "auth"))
_K_POD = frozenset(("exec", "logs", "attach", "port-forward", "cp", "debug"))
_K_CHANGE = frozenset(("create", "apply", "delete", "patch", "edit", "label", "annotate", "scale", "replace",
                       "rollout", "set", "autoscale", "expose", "run"))
_K_NEVER = frozenset(("cordon", "uncordon", "drain", "taint", "certificate", "proxy"))
_K_HELP = frozenset(("help", "completion", "options", "plugin"))
_CLUSTER_SCOPED = frozenset("""
node nodes no namespace namespaces ns clusterrole clusterroles clusterrolebinding clusterrolebindings
persistentvolume persistentvolumes pv storageclass storageclasses sc customresourcedefinition
customresourcedefinitions crd crds priorityclass priorityclasses pc mutatingwebhookconfiguration
mutatingwebhookconfigurations validatingwebhookconfiguration validatingwebhookconfigurations apiservice apiservices
csidriver csidrivers csinode csinodes runtimeclass runtimeclasses volumeattachment volumeattachments ingressclass
ingressclasses certificatesigningrequest certificatesigningrequests csr clusterissuer clusterissuers
""".split())
_K_CP_REMOTE = re.compile(r"^(?:([a-z0-9][a-z0-9-]*)/)?([a-zA-Z0-9][a-zA-Z0-9._-]*):")
_K_HINT = {
    "delete": "To stop a run use `attune teardown RUN` rather than kubectl delete.",
    "create": "Runs are launched with `attune launch RUN`, which names their objects.",
    "apply": "Runs are launched with `attune launch RUN`, which names their objects.",
    "replace": "Runs are launched with `attune launch RUN`, which names their objects.",
    "run": "Runs are launched with `attune launch RUN`, which names their objects.",
}


class _KArgs(object):
    def __init__(self):
        self.contexts = []
        self.namespaces = []
        self.files = []
        self.selectors = []
        self.flags = set()
        self.values = {}
        self.positionals = []


def _kubectl_parse(args, ctx, verb, lenient=False):
    short_value = "nfolcksvL"
    names = dict(_K_SHORT)
    if verb == "patch":
        short_value += "p"
        names["p"] = "patch"
    elif verb == "logs":
        short_value = short_value.replace("f", "")
        names["f"] = "follow"
    st = _KArgs()
    i = 0
    n = len(args)
    while i < n:
        w = args[i]
        t = w.text
        if t.startswith(MARK):
            raise Deny("guard: the kubectl argument %s comes from a variable, a substitution or xargs, so the guard "
                        "cannot see it (unparsable). Write kubectl's arguments out, with --context %s -n %s."
                        % (show(w.raw), ctx.setting("ATTUNE_KUBE_CONTEXT"),
                           ctx.setting("ATTUNE_NAMESPACE")))
        if t == "--":
            break
        if t.startswith("--"):
            name, eq, val = t[2:].partition("=")
            if eq:
                value = Word(val)
            elif name in _K_LONG_VALUE:
                if i + 1 >= n:
                    if not lenient:
                        raise Unparsable("kubectl --%s has no value" % name)
                    value = None
                else:
                    value = args[i + 1]
                    i += 1
            else:
                value = None
            _k_record(st, name, value, ctx)
            i += 1
            continue
        if t.startswith("-") and len(t) > 1:
            k = 1
            while k < len(t):
                ch = t[k]
                if ch in short_value:
                    rest = t[k + 1:]
                    if rest.startswith("="):
                        rest = rest[1:]
                    if rest:
                        value = Word(rest)
                    elif i + 1 < n:
                        value = args[i + 1]
                        i += 1
                    elif lenient:
                        value = None
                    else:
                        raise Unparsable("kubectl -%s has no value" % ch)
                    _k_record(st, names.get(ch, ch), value, ctx)
                    break
                _k_record(st, names.get(ch, ch), None, ctx)
                k += 1
            i += 1
            continue
        st.positionals.append(w)
        i += 1
    return st


def _k_record(st, name, value, ctx):
    if name == "context":
        st.contexts.append(value)
    elif name == "namespace":
        st.namespaces.append(value)
    elif name == "kubeconfig":
        raise Deny(kubeconfig_reason(ctx))
    elif name == "all-namespaces":
        if value is None or value.text.lower() not in ("false", "0"):
            raise Deny("guard: the campaign sees only its own namespace: drop -A/--all-namespaces and pass -n %s "
                        "(with --context %s)." % (ctx.setting("ATTUNE_NAMESPACE"), ctx.setting("ATTUNE_KUBE_CONTEXT")))
    elif name in _K_IDENTITY:
        raise Deny("guard: kubectl --%s is not allowed: the campaign's context alone selects the cluster and the "
                    "user. Drop it and pass --context %s -n %s." % (name, ctx.setting("ATTUNE_KUBE_CONTEXT"),
                                                                   ctx.setting("ATTUNE_NAMESPACE")))
    elif name == "filename":
        st.files.append(value)
    elif name in ("selector", "field-selector"):
        st.selectors.append(value)
    else:
        st.flags.add(name)
        st.values.setdefault(name, []).append(value)


def check_kubectl(prog, args, env, stdin, ctx, depth):
    if "KUBECONFIG" in env:
        raise Deny(kubeconfig_reason(ctx))
    first = _kubectl_parse(args, ctx, None, lenient=True)  # finds the verb: -f and -p depend on it
    verb = first.positionals[0].text if first.positionals else None
    st = _kubectl_parse(args, ctx, verb)
    if "help" in st.flags or verb is None or verb in _K_HELP:
        return  # help text only: kubectl talks to no cluster
    context = ctx.setting("ATTUNE_KUBE_CONTEXT")
    namespace = ctx.setting("ATTUNE_NAMESPACE")
    if verb == "config":
        raise Deny("guard: kubectl config is not allowed: the campaign's context is fixed and the kubeconfig is "
                    "not changed. Pass --context %s -n %s on each kubectl command instead."
                    % (context or "CONTEXT", namespace or "NAMESPACE"))
    if verb in _K_NEVER:
        raise Deny("guard: kubectl %s is never allowed to the agent (it changes nodes or opens the whole API); "
                    "ask the cluster's operators." % verb)
    if verb not in _K_READ and verb not in _K_POD and verb not in _K_CHANGE:
        raise Deny("guard: kubectl %s is not a kubectl command the guard knows, so it cannot check it "
                    "(unparsable). Use get/describe/logs/exec or the attune verbs." % verb)
    if not context or not namespace or not ctx.setting("ATTUNE_RUN_PREFIX"):
        if ctx.setting("ATTUNE_BACKEND") == "local":
            raise Deny("guard: this campaign runs on the local backend (ATTUNE_BACKEND=local) and uses no "
                        "cluster; kubectl is not needed. Use the attune verbs.")
        raise Deny("guard: the campaign's frozen settings (.attune/settings.env) lack ATTUNE_KUBE_CONTEXT, "
                    "ATTUNE_NAMESPACE or ATTUNE_RUN_PREFIX, so the guard cannot check kubectl; start the campaign "
                    "with `attune init` first.")
    if not st.contexts:
        raise Deny("guard: kubectl must name the campaign's cluster: add --context %s -n %s." % (context, namespace))
    for value in st.contexts:
        if value is None or value.text != context:
            raise Deny("guard: --context %s is not this campaign's context; use --context %s -n %s."
                        % (show(value.text) if value else "", context, namespace))
    if not st.namespaces:
        raise Deny("guard: kubectl must name the campaign's namespace: add -n %s (with --context %s)."
                    % (namespace, context))
    for value in st.namespaces:
        if value is None or value.text != namespace:
            raise Deny("guard: namespace %s is not this campaign's; the campaign works only in -n %s "
                        "(with --context %s)." % (show(value.text) if value else "", namespace, context))
    if verb in _K_READ:
        if verb == "auth":
            sub = st.positionals[1].text if len(st.positionals) > 1 else ""
            if sub not in ("can-i", "whoami"):
                raise Deny("guard: kubectl auth %s changes access rules and is never allowed to the agent." % sub)
        for value in st.values.get("output-directory", []):
            check_write(ctx, value, "kubectl cluster-info dump into")
        return
    if verb in _K_POD:
        _k_pod(verb, st, ctx)
        return
    _k_change(verb, st, stdin, ctx)


def _k_pod_ok(ctx, text, allow_log_pod=True):
    prefix = ctx.setting("ATTUNE_RUN_PREFIX")
    log_pod = ctx.setting("AUTOTUNE_LOG_POD")
    kind, slash, name = text.partition("/")
    if not slash:
        kind, name = "pod", text
    if not name:
        return False
    if name.startswith(prefix):
        return True
    return bool(allow_log_pod and log_pod and kind.lower() in ("pod", "pods", "po") and name == log_pod)


def _k_pod_reason(ctx, verb, what):
    return ("guard: kubectl %s only into this campaign's pods (names starting with %s) or the log pod %s; %s is "
            "neither. Follow a run with `attune poll RUN` or read its log through the log pod."
            % (verb, ctx.setting("ATTUNE_RUN_PREFIX"), ctx.setting("AUTOTUNE_LOG_POD") or "(none set)", what))


def _k_pod(verb, st, ctx):
    namespace = ctx.setting("ATTUNE_NAMESPACE")
    prefix = ctx.setting("ATTUNE_RUN_PREFIX")
    pos = st.positionals[1:]
    if verb == "cp":
        if len(pos) < 2:
            raise Deny("guard: kubectl cp needs SRC and DST, one of them POD:PATH in one of this campaign's pods.")
        remotes = 0
        for word, is_dest in ((pos[0], False), (pos[1], True)):
            match = _K_CP_REMOTE.match(word.text)
            if match:
                remotes += 1
                if match.group(1) and match.group(1) != namespace:
                    raise Deny("guard: kubectl cp into namespace %s: the campaign works only in %s."
                                % (match.group(1), namespace))
                if not _k_pod_ok(ctx, match.group(2)):
                    raise Deny(_k_pod_reason(ctx, "cp", "pod %s" % match.group(2)))
            elif is_dest:
                check_write(ctx, word, "kubectl cp into")
        if not remotes:
            raise Deny("guard: kubectl cp needs one side POD:PATH in one of this campaign's pods.")
        return
    if not pos:
        if verb == "logs" and st.selectors and all(v is not None and prefix in v.text for v in st.selectors):
            return
        raise Deny("guard: kubectl %s needs a pod named: one of this campaign's pods (starting with %s) or the "
                    "log pod %s." % (verb, prefix, ctx.setting("AUTOTUNE_LOG_POD") or "(none set)"))
    target = pos[0].text
    if verb == "debug":
        kind = target.partition("/")[0].lower() if "/" in target else "pod"
        if kind in _CLUSTER_SCOPED or not _k_pod_ok(ctx, target, allow_log_pod=False):
            raise Deny(_k_pod_reason(ctx, "debug", target) + " (debug may not target the log pod or nodes)")
        for value in st.values.get("copy-to", []):
            if value is None or not value.text.startswith(prefix):
                raise Deny("guard: kubectl debug --copy-to must name a pod starting with %s." % prefix)
        return
    if not _k_pod_ok(ctx, target):
        raise Deny(_k_pod_reason(ctx, verb, target))


def _cluster_scoped(kind):
    return any(part.strip().lower().split(".")[0] in _CLUSTER_SCOPED for part in kind.split(","))


def _k_name(ctx, verb, kind, name):
    prefix = ctx.setting("ATTUNE_RUN_PREFIX")
    if _cluster_scoped(kind):
        raise Deny("guard: kubectl %s of %s: cluster-scoped objects are outside the campaign's namespace and are "
                    "never changed by the agent." % (verb, kind))
    if not name:
        raise Deny("guard: kubectl %s must name the objects it changes (names starting with %s). %s"
                    % (verb, prefix, _K_HINT.get(verb, "")))
    if not name.startswith(prefix):
        raise Deny("guard: kubectl %s may change only this campaign's objects, whose names start with %s; "
                    "%s %s is not one. %s" % (verb, prefix, kind, show(name),
                                              _K_HINT.get(verb, "Other objects on the cluster belong to others.")))


def _k_refs(pos, verb):
    toks = [w for w in pos if "=" not in w.text
            and not (verb in ("label", "annotate", "set") and w.text.endswith("-"))]
    if not toks:
        return []
    if "/" in toks[0].text:
        return [tuple(w.text.split("/", 1)) for w in toks if "/" in w.text]
    kind = toks[0].text
    if len(toks) == 1:
        return [(kind, "")]
    return [(kind, w.text) for w in toks[1:]]


def _k_change(verb, st, stdin, ctx):
    pos = st.positionals[1:]
    if verb == "rollout":
        sub = pos[0].text if pos else ""
        if sub in ("status", "history"):
            return
        if sub not in ("restart", "undo", "pause", "resume"):
            raise Deny("guard: kubectl rollout %s is not a rollout command the guard knows (unparsable)." % sub)
        pos = pos[1:]
    elif verb == "set":
        sub = pos[0].text if pos else ""
        if sub not in ("image", "env", "resources", "selector", "serviceaccount", "sa", "subject"):
            raise Deny("guard: kubectl set %s is not a set command the guard knows (unparsable)." % sub)
        pos = pos[1:]
    elif verb == "apply" and pos and pos[0].text == "view-last-applied":
        return
    elif verb == "apply" and pos and pos[0].text in ("edit-last-applied", "set-last-applied"):
        pos = pos[1:]
    prefix = ctx.setting("ATTUNE_RUN_PREFIX")
    if "all" in st.flags:
        raise Deny("guard: kubectl %s --all would touch objects that are not the campaign's; name the objects "
                    "(starting with %s). %s" % (verb, prefix, _K_HINT.get(verb, "")))
    if st.selectors and verb not in ("run", "expose", "create", "apply"):
        raise Deny("guard: kubectl %s with a selector may touch objects that are not the campaign's; name the "
                    "objects (starting with %s). %s" % (verb, prefix, _K_HINT.get(verb, "")))
    if "prune" in st.flags:
        raise Deny("guard: kubectl apply --prune deletes objects the manifest does not name; drop --prune.")
    if "kustomize" in st.flags:
        raise Deny("guard: kubectl %s -k: the guard cannot read kustomizations; render it (kubectl kustomize DIR "
                    "> scratch/out.yaml) and pass -f scratch/out.yaml." % verb)
    if "raw" in st.flags:
        raise Deny("guard: kubectl %s --raw bypasses the object checks; name the objects instead." % verb)
    checked = False
    if st.files:
        for obj in _manifest_objects(st, stdin, ctx):
            _k_check_object(ctx, verb, obj)
        checked = True
    if verb == "run":
        _k_name(ctx, verb, "pod", pos[0].text if pos else "")
        checked = True
    elif verb == "create" and pos:
        kind = pos[0].text.lower()
        index = 2 if kind in ("secret", "service", "svc") else 1
        _k_name(ctx, verb, kind, pos[index].text if len(pos) > index else "")
        checked = True
    elif pos:
        for kind, name in _k_refs(pos, verb):
            _k_name(ctx, verb, kind, name)
            checked = True
    for value in st.values.get("name", []):
        _k_name(ctx, verb, "object", value.text if value is not None else "")
    if not checked:
        raise Deny("guard: kubectl %s must name the objects it changes (names starting with %s) or pass -f "
                    "MANIFEST. %s" % (verb, prefix, _K_HINT.get(verb, "")))


def _k_check_object(ctx, verb, obj):
    namespace = ctx.setting("ATTUNE_NAMESPACE")
    kind = obj["kind"] or "object"
    if obj["namespace"] is not None and obj["namespace"] != namespace:
        raise Deny("guard: the manifest (%s) puts %s %s in namespace %s; the campaign works only in %s. Drop "
                    "metadata.namespace or set it to %s." % (obj["where"], kind, show(obj["name"] or "?"),
                                                             show(obj["namespace"]), namespace, namespace))
    _k_name(ctx, verb, kind, obj["name"] or obj["generateName"])


def _manifest_objects(st, stdin, ctx):
    objects = []
    recursive = "recursive" in st.flags
    for word in st.files:
        if word is None:
            raise Deny("guard: kubectl -f without a file.")
        text = word.text
        if text == "-":
            if stdin is None:
                raise Deny("guard: kubectl -f - reads a manifest the guard cannot see; pass it with -f FILE or "
                            "as a here-document so that its names and namespaces can be checked.")
            texts = [("stdin", stdin)]
        elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
            raise Deny("guard: kubectl -f %s: download the manifest first and pass -f FILE, so that the guard can "
                        "check its names and namespaces." % text)
        elif not word.known:
            raise Deny("guard: kubectl -f %s: the guard cannot tell which manifest this is (unparsable); write "
                        "the path out." % show(text))
        else:
            texts = _manifest_texts(ctx, text, recursive)
        for where, body in texts:
            try:
                objects.extend(parse_manifest(body, where))
            except ManifestError as exc:
                raise Deny("guard: cannot parse the manifest %s (%s), so its names and namespaces cannot be "
                            "checked; write it as plain YAML or JSON." % (where, exc))
    if not objects:
        raise Deny("guard: found no objects in the manifest(s), so the guard cannot check what kubectl changes.")
    return objects


def _manifest_texts(ctx, text, recursive):
    path = resolve_path(ctx, text)
    if path in ctx.virtual:
        if ctx.virtual[path] is None:
            raise Deny("guard: the manifest %s is written earlier in this command with text the guard cannot "
                        "see; write it in one call and apply it in the next." % text)
        return [(text, ctx.virtual[path])]
    if os.path.isdir(path):
        out = []
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                if name.endswith((".yaml", ".yml", ".json")):
                    body = read_real(os.path.join(root, name))
                    if body is not None:
                        out.append((os.path.join(root, name), body))
            if not recursive:
                break
        return out
    body = read_real(path)
    if body is None:
        raise Deny("guard: cannot read the manifest %s, so the names and namespaces it holds cannot be checked; "
                    "check the path (relative paths resolve against the working directory)." % text)
    return [(text, body)]
