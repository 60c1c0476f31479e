"""Redaction of secrets from everything dlwatch writes: report files, raw stacks, HTML, the
alert hooks' environment and its own stderr. A leaf module (it imports nothing of the
watchdog): the collectors redact what they read, the report builder redacts the whole
document and its texts once more, by shape, before anything leaves.

Two ways to find a secret, both needed (GitHub's and truffleHog's secret scanning do the same):

- **by name**: the value of an environment variable, a local variable, a command-line flag or a
  ``key=value``/``"key": "value"`` pair whose name looks secret (TOKEN, SECRET, PASSWORD, PAT,
  JWT, DSN, WEBHOOK, API_KEY, …) is replaced whole;
- **by shape**, wherever it appears (an exception message, the stderr tail, a URL in any
  value): passwords inside URLs (``scheme://user:PASSWORD@host``), HTTP credentials
  (``Bearer X``), signed-URL parameters (``X-Amz-Signature=``, ``sig=``, ``token=``), JSON Web
  Tokens, AWS access key ids, private-key blocks, the tokens of well-known services (GitHub,
  GitLab, Slack, Hugging Face, OpenAI-style ``sk-``), the secret path of webhook URLs, and a
  long random-looking string right after a key-like word (an AWS secret access key's 40
  characters right after ``secret key``, ``secret_access_key`` or the like);
- **by value**, learned: once dlwatch has the job's environment (:func:`learn`, at ``run``'s
  start, at ``attach``, and whenever :func:`env` redacts one), the value of each secret-named
  variable there is a secret wherever it appears later (the stderr tail, an exception, a local,
  a summary), whatever its shape: a bare 40-character AWS secret key has none.

What it replaces becomes ``<redacted>``; what stays is what an SRE needs: names, hosts, paths.
"""

from __future__ import annotations

import functools
import json
import re
import urllib.parse
from typing import Any, Dict, Iterable, List, Mapping, Tuple

REDACTED = "<redacted>"

# Names of variables, flags and keys whose values are secrets.
SECRET_NAME = re.compile(
    r"SECRET|TOKEN|PASSW|PASSWD|PASS$|^PASS(?:_|$|PHRASE|CODE)|_PWD$|(?:^|_)PW(?:$|_)|CREDENTIAL|CREDS|PRIVATE|AUTH"
    r"|COOKIE|SESSION"
    r"|API_?KEY|ACCESS_?KEY|_KEY$|^KEY$|_PAT$|JWT|SALT|WEBHOOK|DSN$|CONNECTION_?STRING|SIGNATURE",
    re.I,
)
# Names that match SECRET_NAME but hold no secret: the shell's working directory, counts and
# sizes of tokens, tokenizers, desktop sessions, switches, and where a secret is kept (a path).
_NOT_SECRET = re.compile(
    r"^(?:PWD|OLDPWD|KEYBOARD\w*|\w*TOKENIZERS?\w*|(?:MAX|MIN|NUM|N|TOTAL)_\w*TOKENS?"
    r"|(?:\w*_)?TOKENS?_(?:ID|IDS|LEN|LENGTH|SIZE|COUNT|BUDGET|LIMIT|TYPE|TYPES)"
    r"|XDG_SESSION_\w+|DBUS_SESSION_BUS_ADDRESS|SESSION_MANAGER|DESKTOP_SESSION|\w*(?:DISABLE|ENABLE)\w*"
    r"|\w*_(?:PATH|FILE|DIR|DIRECTORY))$",
    re.I,
)
# Names whose values are secret even when they are only digits (a PIN-like password).
_ALWAYS_SECRET = re.compile(r"PASS|SECRET|(?:^|_)PW(?:$|_)|PIN$", re.I)

# scheme://user:PASSWORD@host: the password may hold "@"; the host part after the last "@" may not.
_URL_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][\w+.-]*://[^/\s:@]*:)[^\s/]+?(?=@[^@\s/]*(?:[/?#\s\"'<>]|$))")
# user:password after curl's, wget's and others' user flags (-u, --user, --proxy-user,
# --http-password): the user stays; a numeric group (docker's -u 1000:1000) is no password.
_USER_FLAG = re.compile(r"(?P<head>(?<![\w-])(?:-u|--user|--proxy-user|-U)[ =]+['\"]?[^\s:'\"]+:)(?P<pw>[^\s'\"]+)")
_AUTH_HEADER = re.compile(r"\b(Bearer|Basic|Token|Digest)\s+([^\s\"',;]+)", re.I)
# HTTP headers whose whole value is a credential: Cookie, Set-Cookie, (Proxy-)Authorization.
_COOKIE_HEADER = re.compile(r"(?P<head>\b(?:Set-)?Cookie:[ \t]*)[^\r\n]+", re.I)
_AUTHORIZATION = re.compile(r"(?P<head>\b(?:Proxy-)?Authorization:[ \t]*(?:[A-Za-z-]+[ \t]+)?)[^\s\"',;]+", re.I)
_SECRET_KEY_WORDS = (
    r"signature|token|secret|passw(?:or)?d|passphrase|pwd|(?<![a-z])pw(?![a-z])|api[_-]?key|apikey|access[_-]?key"
    r"|accountkey|sharedaccesskey|credential|\bsig\b|x-amz-security-token"
)
# key=value where the key looks secret: query strings, connection strings, `TOKEN=V` arguments,
# Python keyword arguments (``password='x'``), ini files (``aws_secret_access_key = V``).
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<key>[\w.-]*(?:" + _SECRET_KEY_WORDS + r")[\w.-]*)(?P<eq>[ \t]*(?<![=!<>])=(?!=)[ \t]*)"
    r"(?:(?P<q>[\"'])(?P<quoted>(?:(?!(?P=q))[^\\\n]|\\.)*)(?P=q)|(?P<value>[^&\s;\"',)}\]]+))",
    re.I,
)
# key: value (YAML, logs) where the key looks secret and the value is not quoted.
_SECRET_COLON = re.compile(
    r"(?<![\w.-])(?P<key>[\w.-]*(?:" + _SECRET_KEY_WORDS + r")[\w.-]*):[ \t]+(?P<value>[^\s,;\"'}\]]+)",
    re.I,
)
# "key": "value" and 'key': 'value' (JSON, a Python dict's repr) where the key looks secret.
_SECRET_PAIR = re.compile(
    r"(?P<head>(?P<q>[\"'])[\w.-]*(?:key|token|secret|passw(?:or)?d|passphrase|pwd|credential|auth|signature)"
    r"[\w.-]*(?P=q)\s*:\s*(?P<q2>[\"']))(?P<value>(?:(?!(?P=q2))[^\\]|\\.)*)(?P=q2)",
    re.I,
)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[A-Z0-9]{16}\b")
_PRIVATE_KEY = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.S
)
_SERVICE_TOKEN = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|xox[a-z](?:\.xox[a-z])?-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"
    r"|hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|AIza[0-9A-Za-z_-]{35})"
)
# Webhook URLs whose path is the secret (Slack, Discord, Teams, generic /hooks/…): host kept.
_WEBHOOK_PATH = re.compile(
    r"(?P<head>https?://[^/\s\"']*(?:hooks\.slack\.com/(?:services|workflows)|discord(?:app)?\.com/api/webhooks"
    r"|webhook\.office\.com/webhookb2|/hooks?)/)[^\s\"'<>]+",
    re.I,
)
# A URL path segment that may be a random secret (>= 24 characters, letters and digits).
_URL_SECRET_SEGMENT = re.compile(r"(?P<head>https?://[^\s\"'<>]*?/)(?P<seg>[A-Za-z0-9_-]{24,})(?=[/?#\s\"'<>]|$)")
# Digests in URL paths that name content, not access: a git commit (40 hex), a sha256 (64 hex).
_DIGEST = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# A long random-looking string right after a key-like word: "invalid token 3f9aQ…", "key: AbC9…",
# "WANDB_API_KEY is 0123…".
_NEAR_KEY_WORD = re.compile(
    r"(?P<head>(?<![A-Za-z0-9])(?:api[_ -]?key|token|secret|password|passwd|credential|bearer)\b[\"']?\s*"
    r"(?:[:=]|is)?\s*[\"']?)(?P<value>[A-Za-z0-9+/_=.-]{20,})",
    re.I,
)

# An AWS secret access key (40 characters of base64) right after the words that name one
# (``secret key``, ``aws_secret_access_key``, ``SecretAccessKey``): alone it is no shape a hash
# does not have too.
_AWS_SECRET_NEAR_NAME = re.compile(
    r"(?P<head>(?:secret|access)[_ -]?(?:access[_ -]?)?key[\"']?\s*(?:[:=]|is)?\s*[\"']?)"
    r"(?P<value>(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=]))",
    re.I,
)

# Learned secrets (:func:`learn`): the values of the job's secret-named variables, longest
# first. A value shorter than this is not learned ("1", "true", a port): it would hide too much.
MIN_LEARNED_CHARS = 8
# At most this many values are learned, each of at most this many characters (the job sets its
# environment: it bounds what each redaction costs).
MAX_LEARNED = 256
_MAX_LEARNED_CHARS = 4096
_learned: Tuple[str, ...] = ()
# A plain lowercase word (``database``, ``disabled``): a setting, not a secret, unless the
# variable's name says password or secret (``_ALWAYS_SECRET``).
_WORD = re.compile(r"[a-z]+(?:[-_][a-z]+)*\Z")

# Values of a secret-named key that are no secret: what redaction wrote, code literals of a
# source line (``return_token_type_ids=False``, ``max_tokens=512``), words for nothing.
_LITERAL = re.compile(r"(?:<redacted>|True|False|None|null|none|true|false|[0-9.]+)\Z")


def _random_looking(text: str) -> bool:
    """Letters and digits mixed (a word or a number alone is no secret)."""
    return any(c.isdigit() for c in text) and any(c.isalpha() for c in text)


def _credential_like(text: str) -> bool:
    """A value after ``Bearer``/``Basic``/``Token``: 8 characters or more, and random-looking,
    base64 padded, or of mixed case past its first letter (a word of prose is none of these)."""
    if len(text) < 8 or text == REDACTED:
        return False
    mixed = any(c.islower() for c in text) and any(c.isupper() for c in text[1:])
    return _random_looking(text) or text.endswith("=") or mixed


def _secret_segment(seg: str) -> bool:
    """A URL path segment that looks like a secret: random-looking, with an unbroken run of 20
    letters and digits (a model name's short words between dashes is no secret), and no
    content digest (``_DIGEST``)."""
    longest = max(len(part) for part in re.split(r"[-_]", seg))
    return _random_looking(seg) and longest >= 20 and not _DIGEST.fullmatch(seg)


def _secret_key(key: str) -> bool:
    """A key matched by a secret word that does not name a count, a tokenizer or a path."""
    return not _NOT_SECRET.match(key.replace("-", "_").replace(".", "_"))


def is_secret_name(name: str) -> bool:
    """Whether a variable, flag or key called ``name`` holds a secret (``SECRET_NAME``)."""
    key = name.lstrip("-").replace("-", "_")
    return bool(key) and bool(SECRET_NAME.search(key)) and not _NOT_SECRET.match(key)


def _learnable(name: str, text: str) -> bool:
    """Whether ``text``, the value of the secret-named variable ``name``, is learned: at least
    :data:`MIN_LEARNED_CHARS` characters, and neither a literal (a number, ``true``) nor a
    plain word unless ``name`` says password or secret."""
    if not MIN_LEARNED_CHARS <= len(text.strip()) <= _MAX_LEARNED_CHARS or text == REDACTED:
        return False
    return bool(_ALWAYS_SECRET.search(name)) or not (_LITERAL.match(text) or _WORD.match(text))


def learn(variables: Mapping[str, str]) -> None:
    """Learn the values of the secret-named variables (:func:`is_secret_name`) of an
    environment (the job's): from now on :func:`value` (and so every other function here)
    replaces each of them, and its percent-encoded form, wherever it appears, whatever its
    shape. Values too short or plain to be a secret are not learned (:func:`_learnable`); at
    most :data:`MAX_LEARNED` are kept, the longest. Costs nothing per tick: redaction runs when
    a report, a summary or a hook's environment is made."""
    global _learned
    found = set(_learned)
    for name, text in variables.items():
        if isinstance(text, str) and is_secret_name(name) and _learnable(name, text):
            found.add(text)
            found.add(urllib.parse.quote(text, safe=""))
    kept = tuple(sorted(found, key=lambda t: (-len(t), t))[:MAX_LEARNED])
    if kept != _learned:
        _learned = kept
        _value_cached.cache_clear()  # what it holds was redacted without them


def value(text: str) -> str:
    """``text`` with every secret found by shape, and every learned one (:func:`learn`), replaced
    (see the module docstring)."""
    if len(text) < 6:  # no shape is shorter
        return text
    if len(text) <= 4096:
        return _value_cached(text)  # a report repeats its strings (a timeline's names, states)
    return _value(text)


@functools.lru_cache(maxsize=8192)
def _value_cached(text: str) -> str:
    return _value(text)


def _assignment(m: re.Match) -> str:
    key, eq, quoted, bare = m.group("key"), m.group("eq"), m.group("quoted"), m.group("value")
    if not _secret_key(key):
        return m.group(0)
    if quoted is not None:
        return f"{key}{eq}{m.group('q')}{REDACTED}{m.group('q')}" if quoted and quoted != REDACTED else m.group(0)
    if _LITERAL.match(bare) or (eq.strip() != eq and not _random_looking(bare)):
        return m.group(0)  # a literal; or code (`password = os.environ[...]`) rather than a value
    return f"{key}{eq}{REDACTED}"


def _colon(m: re.Match) -> str:
    if not _secret_key(m.group("key")) or _LITERAL.match(m.group("value")):
        return m.group(0)
    return m.group(0)[: m.start("value") - m.start(0)] + REDACTED


def _value(text: str) -> str:
    for secret in _learned:  # first: a shape found in part of one would leave the rest
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _PRIVATE_KEY.sub(REDACTED, text)
    text = _URL_CREDENTIALS.sub(lambda m: m.group("head") + REDACTED, text)
    text = _WEBHOOK_PATH.sub(lambda m: m.group("head") + REDACTED, text)
    text = _URL_SECRET_SEGMENT.sub(
        lambda m: m.group("head") + (REDACTED if _secret_segment(m.group("seg")) else m.group("seg")), text
    )
    text = _USER_FLAG.sub(lambda m: m.group(0) if m.group("pw").isdigit() else m.group("head") + REDACTED, text)
    text = _COOKIE_HEADER.sub(lambda m: m.group("head") + REDACTED, text)
    text = _AUTHORIZATION.sub(lambda m: m.group("head") + REDACTED, text)
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)} {REDACTED}" if _credential_like(m.group(2)) else m.group(0), text)
    text = _JWT.sub(REDACTED, text)
    text = _AWS_KEY_ID.sub(REDACTED, text)
    text = _SERVICE_TOKEN.sub(REDACTED, text)
    text = _SECRET_PAIR.sub(lambda m: f"{m.group('head')}{REDACTED}{m.group('q2')}", text)
    text = _SECRET_ASSIGNMENT.sub(_assignment, text)
    text = _SECRET_COLON.sub(_colon, text)
    text = _AWS_SECRET_NEAR_NAME.sub(
        lambda m: m.group("head") + (REDACTED if _random_looking(m.group("value")) else m.group("value")), text
    )
    return _NEAR_KEY_WORD.sub(
        lambda m: m.group("head") + (REDACTED if _random_looking(m.group("value")) else m.group("value")), text
    )


def env(variables: Dict[str, str]) -> Dict[str, str]:
    """An environment with the values of secret-named variables replaced whole, and every
    other value redacted by shape and by the values learned (:func:`value`). Its own secret
    values are learned first (:func:`learn`): a ``DATABASE_URL`` that holds ``DB_PASSWORD``'s
    value hides it too."""
    learn(variables)
    return {k: REDACTED if is_secret_name(k) else value(v) for k, v in variables.items()}


def local(name: str, text: str) -> str:
    """A local variable's ``repr`` as a report may show it: replaced whole when the name looks
    secret (``api_key``, ``password``, ``token``), else redacted by shape."""
    return REDACTED if is_secret_name(name) else value(text)


# Flags whose next argument is user:password (curl, wget, httpie: -u, --user, --proxy-user).
_USER_FLAGS = ("-u", "--user", "--proxy-user", "-U")


def _hidden_flag_value(name: str, value: str) -> bool:
    """Whether the value after a secret-looking flag ``name`` is hidden: not a number after a
    flag that is not a password's (``--token-budget 512``, ``-p 8080``)."""
    return not (_LITERAL.match(value) and not _ALWAYS_SECRET.search(name.lstrip("-")))


def cmdline(args: Iterable[str]) -> List[str]:
    """A command line with secrets replaced: ``--api-key=V`` and ``--api-key V`` (secret-looking
    flag names), ``-p V`` (the password flag of mysql, sshpass, redis-cli and others; a number
    after it is a port and stays), ``TOKEN=V`` assignments, and everything :func:`value` finds
    by shape (a JSON ``--config=`` argument's secret keys included). A flag that names counts,
    a tokenizer or a path (``--max-new-tokens``, ``--tokenizer``, ``--session-dir``) is no
    secret's, and the flag after a secret-looking switch (``--private --lr``) stays."""
    args = list(args)
    out: List[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        name, eq, rest = arg.partition("=")
        if arg.startswith("-p") and not arg.startswith("--") and len(arg) > 2 and not eq and not arg[2:].isdigit():
            out.append("-p" + REDACTED)  # -pSECRET
            continue
        if arg in _USER_FLAGS and i < len(args) and ":" in args[i]:  # curl -u user:password
            user, _, pw = args[i].partition(":")
            out += [arg, args[i] if pw.isdigit() else f"{user}:{REDACTED}"]
            i += 1
            continue
        secret = arg == "-p" or (is_secret_name(name) and (bool(eq) or name.startswith("-")))
        if secret and eq:
            keep = _LITERAL.match(rest) and not _ALWAYS_SECRET.search(name.lstrip("-"))
            out.append(arg if keep else f"{name}={REDACTED}")
        elif secret:
            out.append(arg)
            if i < len(args) and not args[i].startswith("--"):  # the next flag is read as a flag
                out.append(REDACTED if _hidden_flag_value(arg, args[i]) else value(args[i]))
                i += 1
        else:
            out.append(value(arg))
    return out


def document(obj: Any) -> Any:
    """A JSON-like value (dicts, lists, strings) with every string redacted by shape
    (:func:`value`); keys are kept."""
    if isinstance(obj, str):
        return value(obj)
    if isinstance(obj, dict):
        return {k: document(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [document(v) for v in obj]
    return obj


def pyspy_json(text: str) -> str:
    """A raw ``py-spy dump --json`` document with each local replaced when its name looks
    secret and every string redacted by shape; text that is not JSON is redacted as text."""
    try:
        doc = json.loads(text)
    except ValueError:
        return value(text)

    def walk(obj: Any) -> Any:
        if isinstance(obj, dict):
            if "name" in obj and "repr" in obj and isinstance(obj.get("name"), str):
                obj = {**obj, "repr": local(obj["name"], str(obj["repr"]))}
            return {k: walk(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [walk(v) for v in obj]
        return value(obj) if isinstance(obj, str) else obj

    return json.dumps(walk(doc), indent=2) + "\n"
