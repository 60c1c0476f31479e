"""Redaction by name and by shape (:mod:`watchdog.redact`): each kind of secret that reached a
report or a hook before is planted in the strings a report carries, and what an SRE needs
(names, hosts, paths, settings) stays."""

from __future__ import annotations

import json

import pytest

from watchdog import redact
from watchdog.redact import REDACTED

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
SIGNED = (
    "https://bucket.s3.amazonaws.com/shard-00042.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20261201&X-Amz-Signature=9f2c8a1b7e3d4c5f60718293a4b5c6d7e8f90a1b2c3d"
)
WEBHOOK = "https://hooks.slack.com/services/T0ABCDEF1/B0ABCDEF2/Xq8sV3kLm2Np7Rt4Wy9Zb1Cd"


@pytest.mark.parametrize(
    "text, secret",
    [
        (f"401 Unauthorized: token {JWT} expired", JWT),
        (f"requests.get({SIGNED!r}) timed out", "9f2c8a1b7e3d4c5f60718293a4b5c6d7e8f90a1b2c3d"),
        (f"boto3 failed with key {AWS_KEY}", AWS_KEY),
        (f"POST {WEBHOOK} failed", "Xq8sV3kLm2Np7Rt4Wy9Zb1Cd"),
        ("Authorization: Bearer s3cr3t-Bearer-Value-123", "s3cr3t-Bearer-Value-123"),
        ("postgres://trainer:hunter2pass@db.internal:5432/runs", "hunter2pass"),
        ("{'api_key': 'k-9a8b7c6d5e', 'lr': 0.1}", "k-9a8b7c6d5e"),
        ('{"password": "pa ss\\"word", "epochs": 3}', 'pa ss\\"word'),
        ("huggingface_hub.errors: hf_AbCdEfGhIjKlMnOpQrStUvWx0123 is not valid", "hf_AbCdEfGhIjKlMnOpQrStUvWx0123"),
        ("git clone https://x:ghp_0123456789abcdefghijABCDEFGHIJ012345@github.com/o/r", "ghp_0123456789abcdefghij"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "MIIEow"),
        ("ValueError: invalid api key 9e1f0c2b7a3d4e5f6a7b8c9d", "9e1f0c2b7a3d4e5f6a7b8c9d"),
        ("connect(DefaultEndpointsProtocol=https;AccountKey=ZmFrZWtleQ==;EndpointSuffix=x)", "ZmFrZWtleQ=="),
        ("connect(host='db', password='hunter2')", "hunter2"),
        ('login(user="ml", passphrase="correct horse")', "correct horse"),
        ("password: hunter2", "hunter2"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
        ("WANDB_API_KEY is 0123456789abcdef0123456789abcdef01234567", "0123456789abcdef0123"),
        ("slack: xapp-1-A0123BCDE-4567890123-abcdef0123456789", "xapp-1-A0123"),
        ("slack: xoxe.xoxp-1-Mi0yLTEyMzQ1Njc4OTAxMi00NTY3", "Mi0yLTEy"),
        ("slack: xoxd-AbCdEf0123456789ghIJ", "xoxd-AbCdEf"),
        ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGx\n-----END PGP PRIVATE KEY BLOCK-----", "lQOYBGx"),
        ("request headers: Cookie: session=f00dcafe; theme=dark", "f00dcafe"),
        ("Authorization: ApiKey c2VjcmV0LWtleQ", "c2VjcmV0LWtleQ"),
        ("redis://:r3dispass@cache.internal:6379/0", "r3dispass"),
        ("postgres://trainer:p@ssw0rd@db.internal:5432/runs", "ssw0rd"),
        ("pw=hunter2 user=ml", "hunter2"),
        ("CalledProcessError: curl -u dave:CurlUserPw99 https://h failed", "CurlUserPw99"),
        ("wget --user=ml --proxy-user ml:Pr0xyPass https://h", "Pr0xyPass"),
    ],
)
def test_a_secret_is_found_by_its_shape_wherever_it_appears(text, secret):
    out = redact.value(text)
    assert secret not in out and REDACTED in out, out


@pytest.mark.parametrize(
    "text",
    [
        "/home/ml/.cache/huggingface/hub/models--bert-base-uncased/snapshots/main/config.json",
        "tokenizer(text, return_token_type_ids=False, max_length=512)",
        "DataLoader(ds, num_workers=8, pin_memory=True, prefetch_factor=2)",
        "https://github.com/pytorch/pytorch/issues/13246",
        "File /usr/lib/python3.11/site-packages/torch/utils/data/dataloader.py, line 1284, in _get_data",
        "pid 2847 (dataloader_worker): state S, wchan futex_do_wait, syscall 202",
        "the tokenizer's vocabulary has 30522 tokens",
    ],
)
def test_what_an_sre_needs_stays(text):
    assert redact.value(text) == text


def test_a_command_line_loses_its_secrets_and_keeps_its_settings():
    config = json.dumps({"data": "/datasets/imagenet", "wandb": {"api_key": "0123abcd4567"}})
    args = ["mysql", "-p", "sekrit", "-pInline9", "--lr", "0.1", f"--config={config}", "-p8080"]
    out = redact.cmdline(args)
    assert "sekrit" not in out and "-pInline9" not in out and "0123abcd4567" not in " ".join(out)
    assert out[:2] == ["mysql", "-p"] and out[4:6] == ["--lr", "0.1"] and "/datasets/imagenet" in out[6]
    assert out[7] == "-p8080"  # a number after -p is a port, kept


def test_locals_are_redacted_by_name_and_by_shape_and_raw_pyspy_json_too():
    assert redact.local("api_key", "'plain'") == REDACTED
    assert redact.local("headers", f"{{'Authorization': 'Bearer {JWT}'}}").count(JWT) == 0
    raw = json.dumps(
        [
            {
                "frames": [
                    {
                        "name": "fetch",
                        "locals": [{"name": "password", "repr": "'hunter2'"}, {"name": "url", "repr": SIGNED}],
                    }
                ]
            }
        ]
    )
    out = redact.pyspy_json(raw)
    assert (
        "hunter2" not in out
        and "9f2c8a1b7e3d4c5f6071" not in out
        and json.loads(out)[0]["frames"][0]["name"] == "fetch"
    )


def test_a_document_is_redacted_string_by_string_and_its_keys_kept():
    doc = {"stderr_tail": f"RuntimeError: {WEBHOOK} returned 403", "n": 3, "items": [JWT, "ok"]}
    out = redact.document(doc)
    assert set(out) == set(doc) and out["n"] == 3 and out["items"][1] == "ok"
    assert "Xq8sV3kLm2Np7Rt4Wy9Zb1Cd" not in json.dumps(out) and JWT not in json.dumps(out)


@pytest.mark.parametrize(
    "text",
    [
        "Token limit exceeded: 4096 tokens in the prompt",
        "Basic usage: python train.py --epochs 3",
        "tokenizer_path=/models/llama/tokenizer.model",
        "https://huggingface.co/meta-llama/Llama-2-7b-chat-hf-quantized-v2/resolve/main/config.json",
        "https://huggingface.co/bert-base-uncased/resolve/0a6aa9128b6194f4f3c4db429b6cb4891cdb421b/config.json",
        "postgres://db.internal:5432/runs",
        "the password prompt timed out",
        "docker run -u 1000:1000 image python -u train.py",
    ],
)
def test_words_and_names_that_only_look_like_secrets_stay(text):
    assert redact.value(text) == text


def test_variables_named_like_secrets_that_hold_none_stay():
    env = {
        "TOKENIZERS_PARALLELISM": "false",
        "XDG_SESSION_ID": "3",
        "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus",
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
        "HF_TOKEN_PATH": "/home/ml/.cache/huggingface/token",
        "HF_TOKEN": "hf_AbCdEfGhIjKlMnOpQrStUvWx0123",
        "DB_PASSWORD": "1234",
    }
    out = redact.env(env)
    assert out["HF_TOKEN"] == REDACTED and out["DB_PASSWORD"] == REDACTED
    assert {k: v for k, v in out.items() if k not in ("HF_TOKEN", "DB_PASSWORD")} == {
        k: v for k, v in env.items() if k not in ("HF_TOKEN", "DB_PASSWORD")
    }


def test_flags_named_like_secrets_keep_their_numbers_paths_and_the_next_flag():
    args = [
        "train.py",
        "--tokenizer",
        "gpt2",
        "--max-new-tokens",
        "64",
        "--token-budget=512",
        "--session-dir",
        "/runs/s1",
        "--private",
        "--lr",
        "0.1",
        "--passes",
        "3",
        "--pw",
        "hunter2",
        "--api-token",
        "0123abcd",
        "--password=12345",
        "--private",
        "--pw",
        "s3cret",
        "-p",
        "8080",
        "-u",
        "dave:CurlUserPw99",
        "-u",
        "1000:1000",
    ]
    out = redact.cmdline(args)
    assert out[:13] == args[:13], out
    assert out[13:18] == ["--pw", REDACTED, "--api-token", REDACTED, f"--password={REDACTED}"], out
    assert out[18:23] == ["--private", "--pw", REDACTED, "-p", "8080"], out
    assert out[23:] == ["-u", f"dave:{REDACTED}", "-u", "1000:1000"], out


# --- secrets learned from the job's environment ------------------------------------------------

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLE9K"  # 40 characters, no shape of its own


@pytest.fixture
def fresh_learned(monkeypatch):
    """Nothing learned before the test, and what it learned forgotten after it."""
    monkeypatch.setattr(redact, "_learned", ())
    redact._value_cached.cache_clear()
    yield
    redact._value_cached.cache_clear()


def test_a_bare_aws_secret_key_of_the_jobs_environment_is_redacted_wherever_it_appears_later(fresh_learned):
    stderr_line = f"botocore: signing with {AWS_SECRET} failed"
    assert redact.value(stderr_line) == stderr_line  # no shape: before the environment is read
    redact.learn({"AWS_SECRET_ACCESS_KEY": AWS_SECRET, "PATH": "/usr/bin:/bin"})
    assert AWS_SECRET not in redact.value(stderr_line)  # even cached before
    for out in (
        redact.value(f"RuntimeError: S3 refused {AWS_SECRET}"),
        redact.local("pair", repr((AWS_SECRET, "eu-west-1"))),
        redact.value(f"https://h/x?k={AWS_SECRET.replace('/', '%2F').replace('+', '%2B')}"),
        " ".join(redact.cmdline(["python", "train.py", AWS_SECRET])),
        json.dumps(redact.document({"stderr_tail": [f"key {AWS_SECRET}"], "summary": AWS_SECRET})),
        redact.pyspy_json(json.dumps([{"frames": [{"locals": [{"name": "c", "repr": repr(AWS_SECRET)}]}]}])),
    ):
        assert AWS_SECRET not in out and "%2F" not in out and REDACTED in out, out
    assert "eu-west-1" in redact.local("pair", repr((AWS_SECRET, "eu-west-1")))


def test_redacting_an_environment_learns_its_secret_values_for_every_later_text(fresh_learned):
    out = redact.env({"DB_PASSWORD": "Sup3rS3cretPw", "DATABASE_URL": "mysql://db/runs?auth=Sup3rS3cretPw&x=1"})
    assert out["DB_PASSWORD"] == REDACTED and "Sup3rS3cretPw" not in out["DATABASE_URL"]
    assert "Sup3rS3cretPw" not in redact.value("login failed for Sup3rS3cretPw")


def test_values_too_short_or_plain_to_be_a_secret_are_not_learned(fresh_learned):
    redact.learn(
        {
            "GPU_PASSTHROUGH_X": "1",  # too short
            "SESSION_TIMEOUT_MS": "30000000",  # a number of a name that is not a password's
            "AUTH_MODE": "database",  # a plain word of a name that is not a password's
            "TOKENIZERS_PARALLELISM": "false-ish-words",  # not a secret-named variable
            "MODEL_NAME": "bert-base-uncased-secret",  # not a secret-named variable
        }
    )
    text = "x 1 30000000 database false-ish-words bert-base-uncased-secret"
    assert redact.value(text) == text
    redact.learn({"DB_PASSWORD": "sunshine"})  # a word, but the name says password
    assert "sunshine" not in redact.value("logged in with sunshine")


@pytest.mark.parametrize(
    "text",
    [
        f"aws secret key {AWS_SECRET}",
        f"SecretAccessKey: {AWS_SECRET}",
        f'"secret_access_key" "{AWS_SECRET}"',
        f"the AWS_SECRET_ACCESS_KEY is {AWS_SECRET}",
    ],
)
def test_an_aws_secret_key_next_to_its_name_is_found_by_shape(text):
    out = redact.value(text)
    assert AWS_SECRET not in out and REDACTED in out, out


@pytest.mark.parametrize(
    "text",
    [
        "commit 9f2c8a1b7e3d4c5f60718293a4b5c6d7e8f90a1b in the dataset's repo",
        "sha1 c2VjcmV0LXNpZ25hdHVyZS1mb3ItdGVzdHMabcd of shard 7",
        f"checksum {AWS_SECRET}",  # 40 characters without a key's name beside them
    ],
)
def test_a_40_character_digest_without_a_keys_name_beside_it_stays(text):
    assert redact.value(text) == text
