# The grading image: `docker build -t vitref-course .` (README, "Grading a class").
# Debian bookworm with the Python CI tests on (3.11), bubblewrap for the grading sandbox,
# Fashion-MNIST for the training question, CPU-only torch at requirements.txt's pins, and the
# course installed with its grading extra (nbgrader, the PostgreSQL driver). It runs as an
# unprivileged user; the entry point is the autograder's command line:
#   docker run --rm -v "$PWD/instructor:/class" vitref-course grade /class --jobs 4
# The course's solutions/ stay in the image (/opt/vitref-course): the gradebook's grade cells
# come from there when the grading root has no source/ folder.
FROM python:3.11.13-slim-bookworm

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# bubblewrap: the sandbox each submission runs in; dataset-fashion-mnist: the images the
# training question (09_training) is graded on, offline (hidden from student code).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        bubblewrap dataset-fashion-mnist \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/vitref-course

# torch and torchvision at requirements.txt's pins, their CPU-only builds (no CUDA libraries: a
# far smaller image): PyTorch's CPU index has X.Y.Z+cpu, which pip prefers to PyPI's X.Y.Z; their
# dependencies come from PyPI. Copied first so that this layer survives code changes.
COPY requirements.txt ./
RUN python -m venv "$VIRTUAL_ENV" \
    && grep -E '^(torch|torchvision)==' requirements.txt > /tmp/torch-pins.txt \
    && pip install --extra-index-url https://download.pytorch.org/whl/cpu -r /tmp/torch-pins.txt \
    && rm /tmp/torch-pins.txt \
    && python -c "import torch; assert torch.__version__.endswith('+cpu'), torch.__version__"

# The course with its grading extra; requirements.txt's pins as constraints (torch stays the CPU build).
COPY . .
RUN pip install -c requirements.txt ".[grading]" \
    && python -c "import torch, autograder, vitref, nbgrader; assert torch.__version__.endswith('+cpu'), torch.__version__"

# A numeric uid, so that Kubernetes' runAsNonRoot can verify it.
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin grader
USER 10001

ENTRYPOINT ["autograder"]
CMD ["--help"]
