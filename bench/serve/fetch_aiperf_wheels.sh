#!/usr/bin/env bash
# fetch_aiperf_wheels.sh [DIR] — downloads, here, the wheels aiperf 0.13.0 needs on the GPU
# machine beyond what its image holds (Python 3.12, x86-64; ~20 MB), into DIR (default .whl,
# which .git/info/exclude should ignore). There:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
# then serve_bench.py --aiperf /tmp/site/bin/aiperf. The list is what a run imported that the
# image lacked (found with PYTHONPROFILEIMPORTTIME), pinned to the versions aiperf resolves to.
set -euo pipefail
dir=${1:-.whl}
mkdir -p "$dir"
pkgs=(aiperf==0.13.0 aiofiles==24.1.0 aiosqlite==0.22.1 annotated-types==0.8.0 crick==0.0.8
      cyclopts==4.25.3 docstring-parser==0.18.0 rich-rst==2.2.0 python-dotenv==1.2.4
      ffmpeg-python==0.2.0 future==1.0.0 msgspec==0.22.0 orjson==3.11.9 pydantic==2.14.4
      pydantic-core==2.50.5 pydantic-settings==2.16.3 ruamel.yaml==0.18.17
      ruamel.yaml.clib==0.2.15 setproctitle==1.3.8 typing-inspection==0.4.5 pyzmq==26.4.0
      zstandard==0.25.0 rich==14.1.0 jmespath==1.0.1 attrs==26.1.0)
for p in "${pkgs[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 -d "$dir" "$p"
done
echo "fetch_aiperf_wheels: $(ls "$dir" | wc -l) wheels, $(du -sh "$dir" | cut -f1) in $dir"
