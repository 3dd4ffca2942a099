"""The dispatcher lists every command without importing them, and rejects unknown ones."""
import subprocess
import sys

from arldiag.cli import COMMANDS, main


def test_help_lists_all_commands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_is_an_error(capsys):
    try:
        main(["frobnicate"])
    except SystemExit as exc:
        assert exc.code == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_every_command_module_has_the_hooks():
    import importlib

    for name, (mod, _) in COMMANDS.items():
        m = importlib.import_module(mod)
        assert callable(getattr(m, "add_arguments")) and callable(getattr(m, "main")), name


def test_console_script_version():
    out = subprocess.run([sys.executable, "-m", "arldiag.cli", "--version"], capture_output=True, text=True)
    assert out.stdout.strip() == __import__("arldiag").__version__
