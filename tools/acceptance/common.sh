# What the acceptance scripts share; each sources it: `. "$(dirname "$0")/common.sh"`.

# Run a command as a reader sees it: the command line, what it printed (stderr too), its exit status.
step() {
    echo
    echo "\$ $*"
    "$@" 2>&1
    echo "(exit $?)"
}

# copy_course COPY: this course (lessons.yaml, lessons, templates, evidence, README) copied into COPY,
# emptied first, and the shell moved there with a build cache of its own unless COURSECTL_CACHE names one.
copy_course() {
    local here
    here=$(cd "$(dirname "$0")/../.." && pwd)
    rm -rf "$1" && mkdir -p "$1" || exit 2
    (cd "$here" && tar --exclude=.git --exclude=.venv --exclude=.whl --exclude=.coursectl -cf - \
        lessons.yaml lessons templates evidence README.md) | tar -xf - -C "$1" || exit 2
    cd "$1" || exit 2
    export COURSECTL_CACHE=${COURSECTL_CACHE:-$(mktemp -d)/cache}
}
