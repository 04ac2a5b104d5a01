# The Diskless broker. `docker compose up` runs it against MinIO (see docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY diskless ./diskless
COPY hot_tier ./hot_tier
COPY cold_tier ./cold_tier
COPY metadata ./metadata
COPY spark_reader ./spark_reader
RUN pip install --no-cache-dir .
EXPOSE 9092
ENTRYPOINT ["diskless", "serve"]
