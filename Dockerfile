# The Diskless broker alone (no Spark, no test tools). `docker compose up` runs it against
# MinIO (see docker-compose.yml); the base image is pinned.
FROM python:3.11.11-slim-bookworm
WORKDIR /app
COPY pyproject.toml README.md ./
COPY diskless ./diskless
COPY hot_tier ./hot_tier
COPY cold_tier ./cold_tier
COPY metadata ./metadata
COPY spark_reader ./spark_reader
RUN pip install --no-cache-dir .
# Kafka for the host, Kafka for the compose network, admin HTTP (DISKLESS_LISTEN, DISKLESS_HTTP).
EXPOSE 9092 19092 8080
ENTRYPOINT ["diskless", "serve"]
