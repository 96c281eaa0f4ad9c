"""python -m forkload (forkload/__main__.py, issue 45): the command-line
tool of forkload(1) that pip's forkload command runs, from the package it
is imported from (the build tree's link to examples/forkload, or the
wheel's bin/forkload), exec'd with its own exit status and output; and a
clear sentence where an install has no tool."""

import os
import subprocess
import sys

import forkload
import forkload.__main__


def tool(*args):
    return subprocess.run([sys.executable, "-m", "forkload", *args],
                          capture_output=True, text=True, timeout=60,
                          cwd="/")


def test_python_m_forkload_is_the_tool_of_the_package_it_imports():
    assert os.path.dirname(forkload.__main__.TOOL) == os.path.join(
        os.path.dirname(os.path.abspath(forkload.__file__)), "bin")
    got = tool("--version")
    assert got.returncode == 0, got.stderr
    version = subprocess.run([forkload.__main__.TOOL, "--version"],
                             capture_output=True, text=True, timeout=60)
    assert got.stdout == version.stdout
    assert got.stdout.startswith("forkload ")


def test_the_tools_exit_status_and_usage_come_back_whole():
    got = tool("no-such-command")
    assert got.returncode == 2
    assert got.stderr == ("forkload: unknown command 'no-such-command' "
                          "(try 'forkload help')\n")
    got = tool("help")
    assert got.returncode == 0 and got.stdout.startswith("usage: forkload")


def test_an_install_without_the_tool_says_so():
    got = subprocess.run(
        [sys.executable, "-c",
         "import forkload.__main__ as m; m.TOOL = '/nonexistent/forkload'; "
         "m.main()"], capture_output=True, text=True, timeout=60)
    assert got.returncode == 1
    assert got.stderr.startswith("forkload: the command-line tool is not in "
                                 "this install (/nonexistent/forkload)")
