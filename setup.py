"""pip's build of the Python package forkload (pyproject.toml names
setuptools): the extension module forkload._forkload with libforkload
compiled into it: on CPython's limited API of 3.11 (one cp311-abi3 module
for CPython 3.11 and later) where the interpreter building it is 3.11 or
later, and on the full API of 3.10 (a cp310-cp310 module) under 3.10,
whose limited API lacks the buffer protocol the module exports and reads.

Nothing here lists a source file: the files are Makefile.am's own lists
(libforkload_core_la_SOURCES and PY_MODULE_SOURCES, their `if HAVE_...`
blocks decided as configure decides them), and the version is
configure.ac's, so that autotools and pip build the same code.  The
libraries are lib/libraries.m4's, configure's table, found with pkg-config
as configure finds them; a missing one is one line naming its Debian
package.  FORKLOAD_REQUIRE_ALL=1 (set by tools/wheel.sh) makes every
optional library required, so that a wheel never lacks a format silently.
FORKLOAD_STATIC_PREFIX=DIR (set by tools/wheel.sh to tools/deps.sh's
prefix) links every library from DIR, statically (its .a files by their
paths; glibc's libm, libpthread and librt stay shared), and ships their
licenses in forkload/_vendor_licenses.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
STATIC = os.environ.get("FORKLOAD_STATIC_PREFIX")


def fail(line):
    sys.exit("forkload: " + line)


def version():
    text = open(os.path.join(HERE, "configure.ac")).read()
    parts = [re.search(r"m4_define\(\[fl_%s\], \[(\d+)\]\)" % p, text)
             for p in ("major", "minor", "patch")]
    if not all(parts):
        fail("configure.ac has no m4_define of fl_major, fl_minor, fl_patch")
    return ".".join(m.group(1) for m in parts)


def limited_api():
    """configure.ac's fl_limited_api where this interpreter has it (the
    module keeps to it: one abi3 build); None for an older one, which builds
    the module on its full API, for itself alone."""
    text = open(os.path.join(HERE, "configure.ac")).read()
    m = re.search(r"m4_define\(\[fl_limited_api\], \[(0x[0-9a-fA-F]+)\]\)", text)
    if not m:
        fail("configure.ac has no m4_define of fl_limited_api")
    value = int(m.group(1), 16)
    return value if sys.hexversion >= value else None


def makefile_sources(names, defined):
    """The .c files of Makefile.am's variables NAMES, where `if X` holds
    when X is in DEFINED."""
    text = open(os.path.join(HERE, "Makefile.am")).read()
    text = text.replace("\\\n", " ")
    sources, stack = [], []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] == "if":
            stack.append(words[1] in defined)
        elif words[0] == "else":
            stack[-1] = not stack[-1]
        elif words[0] == "endif":
            stack.pop()
        elif (len(words) > 1 and words[0] in names and
              words[1] in ("=", "+=") and all(stack)):
            sources += [w for w in words[2:] if w.endswith(".c")]
    if not sources:
        fail("Makefile.am lists no source in %s" % " ".join(names))
    return sources


def libraries():
    """lib/libraries.m4's table, which configure.ac reads too: (pkg-config's
    name, the least version, config.h's macro (None: needed), Debian's
    package, what a build without it lacks) for each library."""
    text = open(os.path.join(HERE, "lib", "libraries.m4")).read()
    rows = []
    for call in re.findall(r"^FL_LIBRARY\((.*?)\)$", text, re.M | re.S):
        fields = re.findall(r"\[([^\]]*)\]", call)
        if len(fields) != 6:
            fail("lib/libraries.m4: FL_LIBRARY takes 6 fields: %s" % call)
        rows.append(tuple(" ".join(f.split()) or None for f in fields[1:]))
    if not rows:
        fail("lib/libraries.m4 lists no library")
    return rows


def pkg_config(*args):
    try:
        run = subprocess.run(["pkg-config"] + list(args),
                             capture_output=True, text=True)
    except FileNotFoundError:
        fail("pkg-config is needed to find libuv and the image libraries "
             "(apt-get install pkg-config)")
    return run.stdout.split() if run.returncode == 0 else None


def find_libraries():
    """(macros, include dirs, libraries, library dirs, static archives) of
    those found."""
    require_all = os.environ.get("FORKLOAD_REQUIRE_ALL") == "1"
    macros, incs, libs, libdirs, archives = [], [], [], [], []
    libs_args = ["--libs"]
    if STATIC:
        # The prefix's libraries alone, each with those it needs itself.
        os.environ["PKG_CONFIG_LIBDIR"] = os.path.join(STATIC, "lib",
                                                       "pkgconfig")
        os.environ["PKG_CONFIG_PATH"] = ""
        libs_args = ["--static", "--libs"]
        require_all = True
    for name, least, macro, package, gives in libraries():
        spec = name + (" >= " + least if least else "")
        if pkg_config("--exists", spec) is None:
            found = pkg_config("--modversion", name)
            what = "no %s%s" % (name, " >= " + least if least else "") \
                if found is None else "%s is %s, older than %s" % (
                    name, found[0], least)
            if STATIC:
                fail("%s in %s: tools/deps.sh builds it there" % (what, STATIC))
            if macro is None or require_all:
                fail("%s (apt-get install %s)" % (what, package))
            print("forkload: building without %s: %s (apt-get install %s)"
                  % (gives, what, package), file=sys.stderr)
            continue
        if macro:
            macros.append(macro)
        for flag in pkg_config("--cflags", name):
            if flag.startswith("-I"):
                incs.append(flag[2:])
        for flag in pkg_config(*libs_args, name):
            if flag.startswith("-l"):
                archive = os.path.join(STATIC or "", "lib",
                                       "lib%s.a" % flag[2:])
                if STATIC and os.path.exists(archive):
                    archives.append(archive)
                else:
                    libs.append(flag[2:])
            elif flag.startswith("-L") and not STATIC:
                libdirs.append(flag[2:])
    # Each archive once, after every one that needs it.
    archives = [a for i, a in enumerate(archives) if a not in archives[i + 1:]]
    libs = [lib for i, lib in enumerate(libs) if lib not in libs[:i]]
    incs = [inc for i, inc in enumerate(incs) if inc not in incs[:i]]
    return macros, incs, libs, libdirs, archives


class BuildPy(build_py):
    """Starts the package's copy anew: pip builds in the source tree, and
    what an earlier build left in build/lib (another module) would go into
    the wheel beside this one's."""

    def run(self):
        shutil.rmtree(os.path.join(self.build_lib, "forkload"),
                      ignore_errors=True)
        super().run()
        if STATIC:
            shutil.copytree(os.path.join(STATIC, "licenses"),
                            os.path.join(self.build_lib, "forkload",
                                         "_vendor_licenses"))


class BuildExt(build_ext):
    """Writes what configure would (config.h, forkload_version.h), then
    compiles each file in a thread of its own: the library is some
    seventy files.  Then links the command-line tool (Makefile.am's
    examples/forkload) from its own files and the library's objects just
    compiled, into the package as bin/forkload, which python -m forkload
    and the forkload command run (forkload/__main__.py)."""

    fl_macros = []  # the HAVE_ macros of the libraries found
    fl_core = []  # the library's sources, which the tool links too

    def build_extensions(self):
        # setuptools rebuilds an object only when its .c is newer: one
        # compiled against an older header would be linked as it is.
        self.force = True
        self.compiler.force = True
        if not os.path.exists(os.path.join(sysconfig.get_paths()["include"],
                                           "Python.h")):
            fail("no Python.h for %s (apt-get install python3-dev, or your "
                 "Python's development headers)" % sys.executable)
        gen = os.path.join(self.build_temp, "forkload-gen")
        os.makedirs(gen, exist_ok=True)
        ver = version()
        with open(os.path.join(gen, "config.h"), "w") as f:
            f.write("/* setup.py's stand-in for configure's config.h */\n"
                    "#define _GNU_SOURCE 1\n"
                    '#define PACKAGE_VERSION "%s"\n' % ver)
            for macro in self.fl_macros:
                f.write("#define %s 1\n" % macro)
        major, minor, patch = ver.split(".")
        text = open(os.path.join(HERE, "lib", "forkload_version.h.in")).read()
        for key, value in (("FL_VERSION_MAJOR", major),
                           ("FL_VERSION_MINOR", minor),
                           ("FL_VERSION_PATCH", patch),
                           ("PACKAGE_VERSION", ver)):
            text = text.replace("@%s@" % key, value)
        with open(os.path.join(gen, "forkload_version.h"), "w") as f:
            f.write(text)
        # Only PyInit__forkload leaves the module, as with libtool's
        # -export-symbols-regex: libforkload's own names stay inside.
        script = os.path.join(gen, "exports.map")
        with open(script, "w") as f:
            f.write("{ global: PyInit__forkload; local: *; };\n")
        for ext in self.extensions:
            ext.include_dirs.insert(0, gen)
            ext.extra_link_args.append("-Wl,--version-script=" + script)

        compile_one = self.compiler.compile

        def compile_all(sources, **kw):
            jobs = max(1, len(os.sched_getaffinity(0)))
            with ThreadPoolExecutor(jobs) as pool:
                done = pool.map(lambda s: compile_one([s], **kw), sources)
                return [obj for objs in done for obj in objs]
        self.compiler.compile = compile_all
        super().build_extensions()
        self.build_tool(self.extensions[0], gen)

    def build_tool(self, ext, gen):
        sources = makefile_sources(("examples_forkload_SOURCES",),
                                   set(self.fl_macros))
        objects = self.compiler.compile(
            sources, output_dir=self.build_temp,
            include_dirs=[gen, "examples"] + ext.include_dirs[1:],
            extra_postargs=ext.extra_compile_args)
        objects += self.compiler.object_filenames(
            self.fl_core, output_dir=self.build_temp)
        # The module's own libraries and link flags ($LDFLAGS: setuptools
        # gives them to the module alone).
        self.compiler.link_executable(
            objects + ext.extra_objects, "forkload",
            output_dir=os.path.join(self.build_lib, "forkload", "bin"),
            libraries=ext.libraries, library_dirs=ext.library_dirs,
            extra_postargs=shlex.split(os.environ.get("LDFLAGS", "")))


def main():
    api = limited_api()
    macros, incs, libs, libdirs, archives = find_libraries()
    core = makefile_sources(("libforkload_core_la_SOURCES",), set(macros))
    sources = core + makefile_sources(("PY_MODULE_SOURCES",), set(macros))
    if shutil.which(os.environ.get("CC", "cc").split()[0]) is None:
        fail("no C compiler (apt-get install gcc)")
    module = Extension(
        "forkload._forkload",
        sources=sources,
        include_dirs=["lib"] + incs,
        define_macros=[("Py_LIMITED_API", hex(api))] if api else [],
        # Makefile.am's AM_CFLAGS and the library's hidden symbols; asserts
        # stay on, as in the autotools build (Python's flags bring NDEBUG).
        extra_compile_args=["-std=gnu11", "-Wall", "-Wextra",
                            "-fvisibility=hidden", "-UNDEBUG"],
        extra_objects=archives,
        libraries=libs + ["rt", "pthread", "m"],
        library_dirs=libdirs,
        py_limited_api=api is not None,
    )
    BuildExt.fl_macros = macros
    BuildExt.fl_core = core
    setup(
        version=version(),
        package_dir={"forkload": "python/forkload"},
        packages=["forkload"],
        package_data={"forkload": ["py.typed", "*.pyi"]},
        # Not the module that make links into python/forkload/ for the
        # build tree: built for one interpreter, its name would win over
        # the abi3 module's (or be another interpreter's).
        include_package_data=False,
        exclude_package_data={"forkload": ["*.so"]},
        ext_modules=[module],
        # forkload(1)'s pages, where man finds them from the forkload
        # command's folder (PREFIX/bin: PREFIX/share/man).
        data_files=[("share/man/man1", sorted(
            os.path.join("man", f) for f in os.listdir(os.path.join(HERE, "man"))
            if f.endswith(".1")))],
        cmdclass={"build_py": BuildPy, "build_ext": BuildExt},
        options={"bdist_wheel": {"py_limited_api": "cp%d%d" % (
            api >> 24, api >> 16 & 0xFF)}} if api else {},
    )


if __name__ == "__main__":
    main()
