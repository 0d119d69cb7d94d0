"""The gate Space: `elical-hf push MODEL SPACE --kind gate-space` publishes the Gradio app in one commit, and the
pushed app, run on its own, answers in a real headless browser (Debian's chromium driven by playwright): type a
question, read the rendered confidence and decision, move the threshold."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
import torch
from huggingface_hub import RepoCard

from elical_hf import AutoModelForConfidence, push_gate_space
from elical_hf.cli import main as cli_main
from elical_hf.publishing.hub import GATE_SPACE_APP, GATE_SPACE_GRADIO
from tests.conftest import save_tiny_base
from tests.hub_server import hub  # noqa: F401 - the fixture
from tests.serving import TEST_ENV, free_port, gated_model


pytestmark = pytest.mark.float32

QUESTIONS = ["who wrote hamlet", "what is the capital of france", "when was the king born"]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str | None:
    """A Chromium on this machine (Debian's `chromium` package), for playwright's `executable_path`."""
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


@pytest.fixture(scope="module")
def gate_model(tmp_path_factory):
    root = tmp_path_factory.mktemp("space")
    base = save_tiny_base(root / "base", "llama", seed=3, initializer_range=0.2)
    gated_model(base, root / "model", QUESTIONS, answered=1)
    return str(root / "model"), AutoModelForConfidence.from_pretrained(root / "model", dtype=torch.float32)


def load_app():
    pytest.importorskip("gradio")
    spec = importlib.util.spec_from_file_location("gate_space_app", GATE_SPACE_APP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_push_publishes_the_app_its_model_and_card(hub, tmp_path, capsys):
    push_gate_space("alice/gate-model", "alice/gate")
    files = hub.files("alice/gate", "space")
    assert set(files) - {".gitattributes"} == {"app.py", "gate.json", "requirements.txt", "README.md"}
    assert files["app.py"] == GATE_SPACE_APP.read_bytes()
    assert json.loads(files["gate.json"]) == {"model": "alice/gate-model"}
    assert files["requirements.txt"].decode().startswith("elical-hf>=")
    card = RepoCard(files["README.md"].decode())
    assert (card.data.sdk, card.data.sdk_version, card.data.app_file) == ("gradio", GATE_SPACE_GRADIO, "app.py")
    assert card.data.models == ["alice/gate-model"] and hub.repo("alice/gate", "space").sdk == "gradio"
    assert cli_main(["push", "alice/gate-model", "alice/gate2", "--kind", "gate-space"]) == 0
    assert json.loads(capsys.readouterr().out)["repo_id"] == "alice/gate2"
    assert hub.files("alice/gate2", "space")["gate.json"] == files["gate.json"]


def test_push_refuses_a_local_folder_and_bad_names(tmp_path, raise_user_errors):
    with pytest.raises(ValueError, match="is a local path.*Publish it first"):
        cli_main(["push", str(tmp_path), "alice/gate", "--kind", "gate-space"])
    with pytest.raises(ValueError):
        push_gate_space("not a repo id", "alice/gate")
    with pytest.raises(ValueError):
        push_gate_space("alice/gate-model", "no slash")


def test_the_app_answers_as_model_answer(gate_model):
    app = load_app()
    _, model = gate_model
    threshold = model.confidence_config.decision_threshold
    for question, want in zip(QUESTIONS, model.answer(QUESTIONS, max_new_tokens=app.MAX_NEW_TOKENS)):
        confidence, decision, answer = app.ask(model, question, threshold)
        assert (float(confidence), decision) == (pytest.approx(want["confidence"], abs=1e-3), want["decision"])
        assert answer == (want["answer"] or app.ABSTAINED)
    assert app.ask(model, "  ", threshold) == ("", "", "Type a question first.")
    assert app.build_app(model) is not None


def wait_for(url: str, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the app exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"the app did not answer at {url} within {timeout} s")


def test_the_pushed_space_in_a_real_browser(hub, gate_model, tmp_path):
    executable = browser()
    if executable is None:
        pytest.skip("no Chromium on this machine: `apt-get install chromium` (Debian) runs this test")
    pytest.importorskip("gradio")
    sync_api = pytest.importorskip("playwright.sync_api")
    folder, model = gate_model
    push_gate_space("alice/gate-model", "alice/gate")
    space = tmp_path / "space"
    space.mkdir()
    for name, data in hub.files("alice/gate", "space").items():  # the Space as pushed, run from its own folder
        (space / name).write_bytes(data)
    assert (space / "app.py").read_bytes() == GATE_SPACE_APP.read_bytes()
    port = free_port()
    env = {**os.environ, **TEST_ENV, "ELICAL_GATE_MODEL": folder, "GRADIO_SERVER_PORT": str(port),
           "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_ANALYTICS_ENABLED": "False", "ELICAL_GATE_MAX_NEW_TOKENS": "6"}
    log = tmp_path / "app.log"
    with open(log, "w") as output:
        process = subprocess.Popen([sys.executable, "app.py"], cwd=space, env=env, stdout=output,
                                   stderr=subprocess.STDOUT)
    try:
        wait_for(f"http://127.0.0.1:{port}/", process)
        expected = {t: model.answer(QUESTIONS[:1], threshold=t, max_new_tokens=6)[0] for t in (0.0, 1.0)}
        saved = model.answer(QUESTIONS[:1], max_new_tokens=6)[0]
        with sync_api.sync_playwright() as playwright:
            chrome = playwright.chromium.launch(executable_path=executable, headless=True,
                                                args=["--no-sandbox", "--disable-gpu"])
            page = chrome.new_page()
            page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded", timeout=120_000)

            def ask(question: str) -> tuple[str, str, str]:
                """Type `question`, press Ask, and read the three outputs once this question's answer is shown (an
                empty question answers `app.ask`'s prompt to type one: each real question follows one, so a stale
                value is never read, and the first one proves the page is live before anything is typed)."""
                for text in ("", question):
                    page.locator("#question textarea").fill(text)
                    page.locator("#ask").click()
                    check = "===" if not text else "!=="
                    page.wait_for_function(f"document.querySelector('#answer textarea').value {check} "
                                           "'Type a question first.'", timeout=120_000)
                return tuple(page.locator(f"#{name} textarea").input_value() for name in
                             ("confidence", "decision", "answer"))

            ask("")  # the page is live
            confidence, decision, answer = ask(QUESTIONS[0])  # the slider at the model's saved threshold
            assert float(confidence) == pytest.approx(saved["confidence"], abs=1e-3)
            assert decision == saved["decision"]
            for threshold, want in expected.items():
                number = page.locator("#threshold input[type=number]")
                number.fill(str(threshold))
                number.press("Enter")
                confidence, decision, answer = ask(QUESTIONS[0])
                assert float(confidence) == pytest.approx(saved["confidence"], abs=1e-3)
                assert decision == want["decision"] == ("answer" if threshold == 0.0 else "abstain")
                assert answer == (want["answer"] or "(abstained: the model is not confident enough to answer)")
            page.screenshot(path=str(tmp_path / "gate.png"))
            chrome.close()
    finally:
        process.terminate()
        process.wait(timeout=30)
