import ast
from pathlib import Path

import pytest

from lightning_agents.topology import (
    EncoderTextAbstractor,
    SignatureConfig,
    Step,
    abstract_text,
    canonical_arguments,
    hash_observation,
    is_error_text,
    is_read_only_tool,
    step_signature,
)

TOPOLOGY = Path(__file__).resolve().parents[2] / "lightning_agents" / "topology"


def test_topology_package_imports_neither_torch_nor_lightning():
    # The package __init__ of lightning_agents may import Lightning; the topology modules
    # themselves must not, so they stay usable (and testable) as pure logic.
    for source in TOPOLOGY.glob("*.py"):
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in {"torch", "lightning", "pytorch_lightning"}, (
                    f"{source.name} imports {name}"
                )


def test_canonical_arguments_ignores_key_order_whitespace_and_integral_floats():
    a = canonical_arguments('{"b": 2.0, "a": " x "}')
    b = canonical_arguments({"a": "x", "b": 2})
    assert a == b == '{"a":"x","b":2}'
    assert canonical_arguments(None) == canonical_arguments("") == "{}"
    # A malformed string still gets a stable signature instead of raising.
    assert canonical_arguments("not json") == '"not json"'


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"q": [1.0, 2.5, -0.0, 1e3]}', '{"q":[1,2.5,0,1000]}'),  # floats normalised while parsing
        ('{"q": "a b", "r": {"s": "c"}}', '{"q":"a b","r":{"s":"c"}}'),  # inner spaces kept: fast path
        ('{"q": ["  x", "y\\t"]}', '{"q":["x","y"]}'),  # padded strings in a list: stripped
        ('{"q": "\\n x"}', '{"q":"x"}'),  # an escaped newline is whitespace too
        ('{"q": "\\u00e9 "}', '{"q":"\u00e9"}'),  # non-ASCII kept as is, trailing space stripped
        ('{"q": "say \\"hi\\""}', '{"q":"say \\"hi\\""}'),  # escaped quotes survive the slow path unchanged
    ],
)
def test_canonical_arguments_fast_path_agrees_with_the_full_normalisation(text, expected):
    assert canonical_arguments(text) == expected
    # The dict route always takes the full normalisation; both must agree.
    import json

    assert canonical_arguments(json.loads(text)) == expected


def test_call_ids_do_not_enter_the_signature():
    one = step_signature(Step("call", "assistant", "get_user", {"id": 1}))
    two = step_signature(Step("call", "assistant", "get_user", '{"id": 1}'))
    assert one == two == ("call", "assistant", "get_user", '{"id":1}')


def test_observation_signature_hashes_content_with_error_flag():
    ok = step_signature(Step("observation", "tool", "t", content='{"a": 1, "b": 2}'))
    same = step_signature(Step("observation", "tool", "t", content='{"b": 2,  "a": 1}'))
    other = step_signature(Step("observation", "tool", "t", content='{"a": 1, "b": 3}'))
    error = step_signature(Step("observation", "tool", "t", content='{"a": 1, "b": 2}', error=True))
    assert ok == same != other
    assert ok[3].startswith("ok:") and error[3].startswith("error:")
    assert ok[3][3:] == error[3][6:] == hash_observation('{"a":1,"b":2}')


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Error: flight HAT030 not available", True),
        ('{"error": "No such file"}', True),
        ("Traceback (most recent call last):", True),
        ('{"result": "error handling is fine"}', False),
        ("The flight has no errors", False),
        ("", False),
    ],
)
def test_is_error_text(text, expected):
    assert is_error_text(text) is expected


@pytest.mark.parametrize(
    "text, label",
    [
        ("", "empty"),
        ("Yes, please proceed.", "confirm"),
        ("No, I don't want insurance.", "deny"),
        ("Could you give me your user id?", "question"),
        ("Thanks, bye! ###STOP###", "stop"),
        ("The answer is 42.", "answer"),
        ("Unfortunately I cannot change a basic economy flight.", "apology"),
        ("My user id is mia_li_3668.", "statement"),
    ],
)
def test_default_text_abstraction(text, label):
    assert abstract_text("user", text) == label


def test_read_only_guess_and_override():
    assert is_read_only_tool("get_user_details") and is_read_only_tool("calculator") and is_read_only_tool("ls")
    assert not is_read_only_tool("book_reservation") and not is_read_only_tool("mkdir")
    config = SignatureConfig(read_only_tools=frozenset({"book_reservation"}))
    assert config.is_read_only("book_reservation") and not config.is_read_only("get_user_details")


def test_encoder_abstractor_clusters_by_cosine_and_is_order_deterministic():
    calls = []

    def encoder(texts):
        calls.append(list(texts))
        # A toy embedding: counts of a few letters; texts built from the same letters align.
        return [[t.count("a"), t.count("b"), t.count("c")] for t in texts]

    abstractor = EncoderTextAbstractor(encoder, threshold=0.95)
    abstractor.prepare([("user", "aaa"), ("user", "aa a"), ("user", "bbb"), ("user", "aaa")])
    assert calls == [["aaa", "aa a", "bbb"]]  # batched, each distinct text once
    assert abstractor("user", "aaa") == abstractor("user", "aa a") == "c0"
    assert abstractor("user", "bbb") == "c1"
    assert abstractor("assistant", "bbb") == "c0"  # clusters are per actor
    config = SignatureConfig(text_abstractor=abstractor, user_text="abstract")
    assert step_signature(Step("text", "user", content="aaa"), config) == ("text", "user", "", "c0")
    with pytest.raises(ValueError, match="threshold"):
        EncoderTextAbstractor(encoder, threshold=0.0)


def test_system_text_is_left_out_by_default():
    step = Step("text", "system", content="policy")
    assert step_signature(step) is None
    assert step_signature(step, SignatureConfig(include_system=True)) == ("text", "system", "", "statement")


def test_user_text_is_context_by_default():
    step = Step("text", "user", content="Can you change my flight?")
    assert step_signature(step) is None
    assert step_signature(step, SignatureConfig(user_text="abstract")) == ("text", "user", "", "question")
    assert step_signature(Step("text", "assistant", content="Shall I proceed?")) == (
        "text",
        "assistant",
        "",
        "question",
    )
    with pytest.raises(ValueError, match="user_text"):
        SignatureConfig(user_text="drop")


def test_free_text_arguments_are_masked_structured_ones_kept():
    think = Step(
        "call",
        "assistant",
        name="think",
        arguments={"thought": "The user wants two bags so I should check the fare first."},
    )
    other = Step(
        "call",
        "assistant",
        name="think",
        arguments={"thought": "Let me compute the total price of both flights for the user."},
    )
    assert step_signature(think) == step_signature(other) == ("call", "assistant", "think", '{"thought":"<text>"}')
    transfer = Step(
        "call",
        "assistant",
        name="transfer_to_human_agents",
        arguments={"summary": "User wants a refund for a basic economy ticket.", "user_id": "mia_li_3668"},
    )
    assert step_signature(transfer)[3] == '{"summary":"<text>","user_id":"mia_li_3668"}'
    # Identifiers, dates, names and short addresses stay: they are the decision.
    book = Step(
        "call", "assistant", name="book", arguments={"date": "2024-05-20", "city": "New York City", "id": "HAT136"}
    )
    assert step_signature(book)[3] == '{"city":"New York City","date":"2024-05-20","id":"HAT136"}'
    # free_text_words=0 keeps every argument verbatim.
    assert "<text>" not in step_signature(think, SignatureConfig(free_text_words=0))[3]


def test_a_question_is_a_question_whatever_its_opening():
    from lightning_agents.topology.signatures import abstract_text

    # Real agent replies from tau2-bench runs asking for the same thing: classed by the first word
    # they were confirm / question / deny / stop, and pooled trials split at their first reply.
    for text in (
        "Sure! Could you please provide your user ID?",
        "I'd be happy to help! Could you please provide your user ID?",
        "No worries! Could you please provide your user ID?",
        "Thank you, Yara. What changes would you like to make to your reservation?",
    ):
        assert abstract_text("assistant", text) == "question", text
    assert abstract_text("user", "Yes, please go ahead.") == "confirm"
    assert abstract_text("user", "No, that's not it.") == "deny"
    assert abstract_text("user", "Thanks, bye!") == "stop"
    assert abstract_text("user", "Is it done? ###STOP###") == "stop"
