# The fedxab image used by compose.yaml: `fedxab server ...` and `fedxab client ...`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY fedxab ./fedxab
RUN pip install . \
    && useradd --create-home --uid 10001 fedxab \
    && mkdir /data && chown fedxab /data

# /data holds checkpoints and results (a named volume in compose.yaml, which takes this owner).
USER fedxab
WORKDIR /data
ENTRYPOINT ["fedxab"]
CMD ["--help"]
