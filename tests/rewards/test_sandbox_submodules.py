"""Tests that reach a standard-library submodule, or a module bound under an alias, only through
the solution's import; and attacks on how the harness resolves them.

In one file (how BigCodeBench, evalplus and MBPP grade), a solution's ``import urllib.parse`` makes
``urllib.parse`` an attribute of ``urllib`` for the tests too, and its ``import
xml.etree.ElementTree as ET`` gives the tests ``ET``. The harness bound only top-level modules
reported under their own name, so such correct solutions scored 0 (``module 'urllib' has no
attribute 'parse'``). Now the candidate also reports aliases (``["ET", "xml.etree.ElementTree"]``),
which the harness takes only for standard-library modules under the rules of
``la_harness._alias_allowed``, and the harness imports the submodules the trusted tests' own
attribute chains name. Everything it imports on the candidate's word comes from the standard
library's directory, with nothing else on the import path while it is imported.

BigCodeBench/339: bigcode-project/bigcodebench-annotation ``hf_data/BigCodeBench.jsonl.gz`` @
d8a1b7b418b5c73b32e6d9731e062f549818c8d9 (Apache-2.0), ``code_prompt + canonical_solution`` and
``test`` verbatim; the unittest runner after it is ours.
"""

from __future__ import annotations

import importlib.util
import pickle
import subprocess
import sys

import pytest
from sandbox_modes import ISOLATIONS, forged_ready, score

from lightning_agents.rewards import CodeVerifier

BCB_339_SOLUTION = (
    "import json\n"
    "import urllib.parse\n"
    "import hmac\n"
    "import hashlib\n"
    "def task_func(req_data, secret_key):\n"
    "    if not isinstance(req_data, dict):\n"
    '        raise TypeError("req_data must be a dictionary")\n'
    "    # Convert request data to json string\n"
    "    json_req_data = json.dumps(req_data)\n"
    "    # Create a new hmac object with the secret key and the json string as the message\n"
    "    hmac_obj = hmac.new(secret_key.encode(), json_req_data.encode(), hashlib.sha256)\n"
    "    # Get the hmac signature\n"
    "    hmac_signature = hmac_obj.hexdigest()  # Use hexdigest for a hexadecimal representation\n"
    "    # URL encode the hmac signature\n"
    "    url_encoded_signature = urllib.parse.quote_plus(hmac_signature)\n"
    "\n"
    "    return url_encoded_signature"
)
BCB_339_TEST = (
    "import unittest\n"
    "class TestCases(unittest.TestCase):\n"
    "    def setUp(self):\n"
    '        """Set up common test data and secret key."""\n'
    "        self.secret_key = 'test_secret_key'\n"
    "    \n"
    "    def compute_expected_signature(self, req_data):\n"
    '        """Compute the expected HMAC signature for comparison in tests."""\n'
    "        json_req_data = json.dumps(req_data)\n"
    "        hmac_obj = hmac.new(self.secret_key.encode(), json_req_data.encode(), hashlib.sha256)\n"
    "        hmac_hex = hmac_obj.hexdigest()\n"
    "        url_encoded_signature = urllib.parse.quote_plus(hmac_hex)\n"
    "        \n"
    "        return url_encoded_signature\n"
    "    def test_return_type(self):\n"
    '        """Ensure the function returns a string."""\n'
    "        result = task_func({'key': 'value'}, self.secret_key)\n"
    "        self.assertIsInstance(result, str)\n"
    "    def test_known_data_signature(self):\n"
    '        """Validate the HMAC signature against a known output for specific data."""\n'
    "        known_data = {'known': 'data'}\n"
    "        expected_signature = self.compute_expected_signature(known_data)\n"
    "        result = task_func(known_data, self.secret_key)\n"
    "        self.assertEqual(result, expected_signature)\n"
    "    def test_empty_data(self):\n"
    '        """Verify the function behaves correctly with empty input data."""\n'
    "        result = task_func({}, self.secret_key)\n"
    "        expected_signature_for_empty_data = self.compute_expected_signature({})\n"
    "        self.assertEqual(result, expected_signature_for_empty_data)\n"
    "    def test_complex_data_structure(self):\n"
    '        """Check the function\'s behavior with complex nested data structures."""\n'
    "        complex_data = {'list': [1, 2, 3], 'nested': {'key': 'value'}}\n"
    "        result = task_func(complex_data, self.secret_key)\n"
    "        expected_signature = self.compute_expected_signature(complex_data)\n"
    "        self.assertEqual(result, expected_signature)\n"
    "    def test_non_dict_input(self):\n"
    '        """Ensure non-dictionary inputs raise the appropriate error."""\n'
    "        with self.assertRaises(TypeError):\n"
    "            task_func('not a dict', self.secret_key)\n"
    "    def test_different_data_different_signatures(self):\n"
    '        """Test that different data results in different HMAC signatures."""\n'
    "        data1 = {'data': 'test1'}\n"
    "        data2 = {'data': 'test2'}\n"
    "        result1 = task_func(data1, self.secret_key)\n"
    "        result2 = task_func(data2, self.secret_key)\n"
    "        expected_signature1 = self.compute_expected_signature(data1)\n"
    "        expected_signature2 = self.compute_expected_signature(data2)\n"
    "        self.assertEqual(result1, expected_signature1)\n"
    "        self.assertEqual(result2, expected_signature2)\n"
    "        self.assertNotEqual(result1, result2)\n"
    "    def test_consistent_hash_with_same_input(self):\n"
    '        """Test that hashing the same data multiple times results in the same hashes."""\n'
    "        data = {'consistent': 'data'}\n"
    "        result1 = task_func(data, self.secret_key)\n"
    "        result2 = task_func(data, self.secret_key)\n"
    "        expected_signature = self.compute_expected_signature(data)\n"
    "        self.assertEqual(result1, expected_signature)\n"
    "        self.assertEqual(result2, expected_signature)\n"
    "        self.assertEqual(result1, result2)"
)

# BigCodeBench's grader runs the TestCases of one file; here the verdict is this assertion.
UNITTEST_RUNNER = """
import unittest as _unittest
_result = _unittest.TextTestRunner(verbosity=0).run(_unittest.defaultTestLoader.loadTestsFromTestCase(TestCases))
assert _result.wasSuccessful(), [str(err) for _, err in _result.failures + _result.errors]
"""


@pytest.fixture(params=ISOLATIONS)
def verifier(request) -> CodeVerifier:
    """Both isolation modes run the same candidate and harness scripts."""
    return CodeVerifier(isolation=request.param, timeout_s=10)


def _passes_in_one_file(program: str, tests: str) -> None:
    """The benchmarks' own way: program and tests as one file (run apart: programs here tamper
    with their own ``sys.modules``)."""
    done = subprocess.run([sys.executable, "-c", program + "\n" + tests], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-500:]


def test_bigcodebench_339_canonical_solution_passes(verifier):
    # its tests call urllib.parse.quote_plus, json.dumps, hmac.new and hashlib.sha256 through the
    # solution's imports: `module 'urllib' has no attribute 'parse'` made it a 0
    tests = BCB_339_TEST + "\n" + UNITTEST_RUNNER
    _passes_in_one_file(BCB_339_SOLUTION, tests)
    verdict = score(verifier, BCB_339_SOLUTION, tests)
    assert verdict.passed, verdict
    wrong = BCB_339_SOLUTION.replace("quote_plus(hmac_signature)", "quote_plus(hmac_signature[1:])")
    verdict = score(verifier, wrong, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


# (solution, tests): each passes as one file and scored 0 before.
SUBMODULE_CASES = {
    "ET-alias": (
        "import xml.etree.ElementTree as ET\ndef f(s):\n    return ET.fromstring(s).tag\n",
        "assert f('<a/>') == ET.fromstring('<a/>').tag\n",
    ),
    "xml.etree-chain": (
        "import xml.etree.ElementTree\ndef f(s):\n    return xml.etree.ElementTree.fromstring(s).tag\n",
        "assert f('<a/>') == xml.etree.ElementTree.fromstring('<a/>').tag\n",
    ),
    "from-package-import-module": (
        "from xml.etree import ElementTree\ndef f(s):\n    return ElementTree.fromstring(s).tag\n",
        "assert f('<a/>') == ElementTree.fromstring('<a/>').tag\n",
    ),
    "alias-then-chain": (
        "from xml import etree\nimport xml.etree.ElementTree\ndef f(s):\n    return etree.ElementTree.fromstring(s).tag\n",
        "assert f('<a/>') == etree.ElementTree.fromstring('<a/>').tag\n",
    ),
    "abc-of-collections": (
        "from collections import abc\ndef f(x):\n    return isinstance(x, abc.Sized)\n",
        "assert f([]) == isinstance([], abc.Sized)\n",
    ),
    "concurrent.futures": (
        "import concurrent.futures\ndef f():\n    return 1\n",
        "assert f() == 1\nassert concurrent.futures.ThreadPoolExecutor\n",
    ),
    "email.utils": (
        "import email.utils\ndef f(a):\n    return email.utils.parseaddr(a)[1]\n",
        "assert f('A <a@b.c>') == email.utils.parseaddr('A <a@b.c>')[1]\n",
    ),
    "urllib.parse": (
        "import urllib.parse\ndef f(s):\n    return urllib.parse.quote(s)\n",
        "assert f('a b') == urllib.parse.quote('a b')\n",
    ),
    "dt-alias": (
        "import datetime as dt\ndef f():\n    return 2024\n",
        "assert f() == dt.date(2024, 1, 1).year\n",
    ),
    "tests-import-the-package": (
        "import urllib.parse\ndef f(s):\n    return urllib.parse.quote(s)\n",
        "import urllib\nassert f('a b') == urllib.parse.quote('a b')\n",
    ),
}


@pytest.mark.parametrize("case", sorted(SUBMODULE_CASES))
def test_correct_solution_passes_with_the_submodule_it_imports(verifier, case):
    program, tests = SUBMODULE_CASES[case]
    _passes_in_one_file(program, tests)
    verdict = score(verifier, program, tests)
    assert verdict.passed, verdict


@pytest.mark.parametrize(
    ("program", "tests"),
    [
        (
            "import os.path\ndef f(p):\n    return os.path.basename(p)\n",
            "assert f('/a/b') == os.path.basename('/a/b')\n",
        ),
        ("import json.decoder\ndef f():\n    return 1\n", "assert f() == 1\nassert json.decoder.JSONDecodeError\n"),
    ],
)
def test_submodules_the_package_loads_itself_still_pass(verifier, program, tests):
    # these passed before (os and json import them): the chains add nothing that breaks them
    verdict = score(verifier, program, tests)
    assert verdict.passed, verdict


def test_wrong_answer_still_fails_with_the_alias_resolved(verifier):
    program, tests = SUBMODULE_CASES["ET-alias"]
    verdict = score(verifier, program.replace(".tag", ".tag + 'x'"), tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


# ------------------------------------------------------------------------------------- attacks
def _fake_module(alias: str, name: str, body: str = "") -> str:
    """A program binding ``alias`` to a module object of its own named ``name``: its ``ready``
    frame then reports ``[alias, name]``, whatever ``name`` is."""
    return f"import sys\n{alias} = type(sys)({name!r})\n{body}def f():\n    return 1\n"


def _stays_remote(alias: str) -> str:
    """Tests that pass only when the harness left ``alias`` the candidate's (imported nothing for it)."""
    return f"assert f() == 1\nassert type({alias}).__name__ == 'Remote'\n"


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("et", "xml.etree.NoSuchModule"),  # a fake submodule of a real package
        ("et", "xml..etree.ElementTree"),
        ("et", ".xml.etree.ElementTree"),
        ("et", "xml.etree.ElementTree."),
        ("et", "xml/etree/ElementTree"),
        ("et", "../../../tmp/ElementTree"),
        ("et", "xml.etree.ElementTree\x00"),
        ("et", "xml.etree.ElementTree "),
        ("et", "\uff58ml.etree.ElementTree"),  # fullwidth x: an identifier, not ASCII
        ("et", "xml." * 2000 + "etree"),  # too long, too deep
        ("pa", "email._parseaddr"),  # private
        ("tm", "unittest.test.testmock"),  # the standard library's own test suites
        ("tt", "tkinter.ttk"),  # never imported (Tk)
        ("nl", "numpy.linalg"),  # not the standard library
        ("fs", "xml.etree.ElementTree.fromstring"),  # a function, not a module
    ],
)
def test_fake_or_malformed_module_names_are_not_imported(verifier, alias, name):
    # each alias abbreviates the name's last part, so only the name itself can be refused
    verdict = score(verifier, _fake_module(alias, name), _stays_remote(alias))
    assert verdict.passed, verdict


def test_tests_get_the_real_submodule_not_the_candidates(verifier):
    # The program's ET is a fake named like the real one, whose fromstring agrees with its wrong
    # answer (in one file this passes); its own sys.modules holds the fake too. The tests get
    # the harness's own import.
    program = (
        "import sys, types\n"
        "import xml.etree\n"
        "ET = types.ModuleType('xml.etree.ElementTree')\n"
        "ET.fromstring = lambda s: types.SimpleNamespace(tag='forged')\n"
        "sys.modules['xml.etree.ElementTree'] = xml.etree.ElementTree = ET\n"
        "def f(s):\n    return 'forged'\n"
    )
    tests = SUBMODULE_CASES["ET-alias"][1]
    _passes_in_one_file(program, tests)
    verdict = score(verifier, program, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


@pytest.mark.parametrize(
    ("program", "tests"),
    [
        # `json` means json: plistlib.dumps under the tests' `json` would agree with this answer
        (
            "import plistlib as json\ndef f():\n    return json.dumps({'a': 1})\n",
            "assert f() == json.dumps({'a': 1})\n",
        ),
        # `os` abbreviates ossaudiodev, yet the tests' `os` means os (skipped where Python lacks it)
        pytest.param(
            "import ossaudiodev as os\ndef f():\n    return 'OSSAudioError'\n",
            "assert f() == os.error.__name__\n",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("ossaudiodev") is None, reason="no ossaudiodev in this Python"
            ),
        ),
        # another alias must abbreviate the module it names: `js` is not plistlib
        (
            "import plistlib as js\ndef f():\n    return js.dumps({'a': 1})\n",
            "assert f() == js.dumps({'a': 1})\n",
        ),
        # an alias naming the module's own root for another module (`xml` for a submodule)
        (
            "import xml.etree.ElementTree as xml\ndef f():\n    return 'a'\n",
            "assert f() == xml.fromstring('<a/>').tag\n",
        ),
        # a stdlib name for a submodule of a package that runs things (`subprocess` for
        # asyncio.subprocess), and aliases of submodules that do (logging.config evaluates its file)
        (
            "import asyncio.subprocess as subprocess\ndef f():\n    return 'PIPE'\n",
            "assert f() == [k for k in dir(subprocess) if k == 'PIPE'][0]\n",
        ),
        (
            "import logging.config as cfg\ndef f():\n    return 'dictConfig'\n",
            "assert f() == cfg.dictConfig.__name__\n",
        ),
        (
            "import pydoc as pd\ndef f():\n    return 'pipepager'\n",
            "assert f() == pd.pipepager.__name__\n",
        ),
    ],
    ids=[
        "json-is-plistlib",
        "os-is-ossaudiodev",
        "js-is-plistlib",
        "xml-is-ElementTree",
        "subprocess-is-asyncio.subprocess",
        "cfg-is-logging.config",
        "pd-is-pydoc",
    ],
)
def test_alias_cannot_put_another_module_behind_the_tests_name(verifier, program, tests):
    # each passes as one file, where the solution picks what the tests' name means; the harness
    # takes a pick that could make a wrong answer pass only where the name fits the module
    _passes_in_one_file(program, tests)
    verdict = score(verifier, program, tests)
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


class _Mkdir:
    """Unpickling this makes the directory ``path``: code run by pickle.loads."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        import os

        return os.mkdir, (self.path,)


def test_code_running_module_is_never_bound_under_an_alias(verifier, tmp_path):
    # `p` abbreviates pickle; were it bound, the tests' p.loads would unpickle the candidate's
    # bytes in the harness, outside the sandbox, and run what they say
    marker = tmp_path / "unpickled_in_harness"
    payload = pickle.dumps(_Mkdir(str(marker)))
    program = f"import pickle as p\ndef f():\n    return {payload!r}\n"
    verdict = score(verifier, program, "assert p.loads(f()) is None\n")
    assert not marker.exists()
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict


@pytest.mark.parametrize(
    ("alias", "name", "planted"),
    [
        ("we", "asyncio.windows_events", ["_overlapped", "_winapi", "msvcrt"]),  # Windows only
        ("ps", "multiprocessing.popen_spawn_win32", ["msvcrt", "_winapi"]),
        ("ev", "xml.etree.evil", []),  # a submodule file planted in a package of the trainer's path
        ("copy", "copy", ["org"]),  # copy looks for Jython's org.python.core
        ("subprocess", "subprocess", ["msvcrt"]),  # subprocess looks for Windows' msvcrt
    ],
)
def test_nothing_is_imported_from_the_trainers_path(verifier, tmp_path, monkeypatch, alias, name, planted):
    # The harness's path ends with the trainer's sys.path. Modules the standard library looks for
    # but lacks here (Windows', Jython's) are planted there, each writing a marker when imported;
    # so is a package named like the standard library's `xml` with a submodule `etree.evil`.
    marker = tmp_path / "ran_in_harness"
    for module in planted:
        (tmp_path / f"{module}.py").write_text(f"open({str(marker)!r}, 'a').write({module!r})\n")
    (tmp_path / "xml" / "etree").mkdir(parents=True)
    (tmp_path / "xml" / "__init__.py").write_text("")
    (tmp_path / "xml" / "etree" / "__init__.py").write_text("")
    (tmp_path / "xml" / "etree" / "evil.py").write_text(f"open({str(marker)!r}, 'a').write('evil')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    program = f"import {name}\n{alias} = {name}\n" if alias == name else _fake_module(alias, name)
    if alias == name:
        program += "def f():\n    return 1\n"
    score(verifier, program, f"assert f() == 1\nassert {alias}\n")
    assert not marker.exists(), marker.read_text()


def test_submodules_of_non_stdlib_packages_stay_the_candidates(verifier):
    # numpy is importable by the harness (the trainer has it), but never on the candidate's word:
    # neither under its own name, nor an alias, nor through the tests' chains on it
    pytest.importorskip("numpy")
    program = "import sys\nnumpy = type(sys)('numpy')\nnp = type(sys)('numpy')\nnl = type(sys)('numpy.linalg')\n"
    program += "def f():\n    return 1\n"
    tests = (
        "assert f() == 1\n"
        "assert [type(m).__name__ for m in (numpy, np, nl)] == ['Remote'] * 3\n"
        "if f() == 2:\n    numpy.linalg.norm\n"
    )
    verdict = score(verifier, program, tests)
    assert verdict.passed, verdict


def test_the_tests_chains_import_nothing_the_tests_do_not_name(verifier):
    # only prefixes of the tests' own chains are imported: urllib.parse, not urllib.request
    program, _ = SUBMODULE_CASES["urllib.parse"]
    tests = (
        "assert f('a b') == urllib.parse.quote('a b')\n"
        "assert not {'urllib.request', 'xml.etree.ElementTree', 'http.server'} & set(__import__('sys').modules)\n"
    )
    verdict = score(verifier, program, tests)
    assert verdict.passed, verdict


@pytest.mark.parametrize(
    "modules",
    [[["ET"]], [["ET", "xml", "etree"]], [["ET", 1]], [[1, "xml"]], [["ET", ["xml"]]], [None]],
    ids=["one", "three", "int-module", "int-name", "nested", "none"],
)
def test_malformed_alias_entries_are_a_load_error(verifier, modules):
    verdict = score(verifier, forged_ready({"ready": 1, "modules": modules}), "assert f() == 1\n")
    assert not verdict.passed and verdict.reason == "load_error", verdict


def test_huge_module_report_is_cheap_and_buys_nothing(verifier):
    # 100,000 aliases and one 300 kB name claim everything (a 4 MB frame, under a raised frame
    # cap); the program then dies before answering
    verifier.max_reply_bytes = 8 << 20
    modules = [[f"m{i}", "xml.etree.ElementTree"] for i in range(100_000)]
    modules += [["f", "xml.etree.ElementTree"], ["ET", "x" * 300_000], "f"]
    verdict = score(verifier, forged_ready({"ready": 1, "modules": modules}), SUBMODULE_CASES["ET-alias"][1])
    assert not verdict.passed and verdict.reason == "candidate_died", verdict
    assert verdict.duration_s < 8, verdict


def test_alias_reported_for_the_entry_point_scores_zero(verifier):
    # `f` does not abbreviate ElementTree: still the candidate's, and a module is not callable
    program = "import xml.etree.ElementTree as f\n"
    verdict = score(verifier, program, "assert f('<a/>') == 'a'\n")
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
    # `e` does, and binding it leaves the tests calling no function of the candidate's: a 0
    program = "import xml.etree.ElementTree as e\n"
    verdict = score(verifier, program, "assert e.fromstring('<a/>').tag == 'a'\n")
    assert not verdict.passed and verdict.reason == "wrong_answer", verdict
