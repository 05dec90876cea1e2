"""Sends numbered log records to an OTLP receiver with the OpenTelemetry Python SDK (PyPI
opentelemetry-sdk and its OTLP exporters), as an instrumented application would.

    otlp_send.py --protocol http|grpc|json --endpoint URL --count N [--gzip] [--tag NAME] [--ca FILE]

Record i: body "NAME i", severity WARN (13) for even i and ERROR (17) for odd i, attributes
{"n": i, "protocol": NAME, "ok": true, "ratio": 0.25, "tags": ["a", "b"]}, time BASE + i*1000003
+ 7 ns and observed time BASE + i ns (BASE = 1700000000000000000), resource service.name
otlp-test and host.name sdk-host, scope loghaul.test 1.0.

`json` has no exporter in the SDK: the SDK's own protobuf encoding of each batch
(opentelemetry-exporter-otlp-proto-common) is written as protobuf's JSON mapping and POSTed
with `requests`, as OTLP/JSON clients do. Exits 0 once every batch was exported.
"""

import argparse
import sys

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogExporter, LogExportResult
from opentelemetry.sdk.resources import Resource

BASE = 1_700_000_000_000_000_000


class JsonExporter(LogExporter):
    """OTLP/JSON over HTTP: the SDK's protobuf message in protobuf's JSON mapping."""

    def __init__(self, endpoint, gzip):
        import requests

        self.session = requests.Session()
        self.endpoint = endpoint
        self.gzip = gzip
        self.failed = False

    def export(self, batch):
        import gzip as gz

        from google.protobuf.json_format import MessageToJson
        from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs

        body = MessageToJson(encode_logs(batch), use_integers_for_enums=True).encode()
        headers = {"Content-Type": "application/json"}
        if self.gzip:
            body = gz.compress(body)
            headers["Content-Encoding"] = "gzip"
        for _attempt in range(20):
            resp = self.session.post(self.endpoint, data=body, headers=headers, timeout=30)
            if resp.status_code == 200:
                return LogExportResult.SUCCESS
            if resp.status_code not in (429, 502, 503, 504):
                break
        print(f"json export failed: {resp.status_code} {resp.text}", file=sys.stderr)
        self.failed = True
        return LogExportResult.FAILURE

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


class Checked(LogExporter):
    """Notes a failed export: the SDK's processor logs one and goes on, and force_flush still
    reports success, so a sender that must not lie checks each batch's result itself."""

    def __init__(self, inner):
        self.inner = inner
        self.failed = False

    def export(self, batch):
        try:
            result = self.inner.export(batch)
        except Exception:
            self.failed = True
            raise
        # The SDK's exporters return LogRecordExportResult, older ones LogExportResult: the
        # same names.
        if getattr(result, "name", None) != "SUCCESS":
            self.failed = True
        return result

    def shutdown(self):
        self.inner.shutdown()

    def force_flush(self, timeout_millis=30000):
        return self.inner.force_flush(timeout_millis)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--protocol", choices=["http", "grpc", "json"], required=True)
    p.add_argument("--endpoint", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--gzip", action="store_true")
    p.add_argument("--tag", default=None)
    p.add_argument("--ca", default=None, help="trust this CA file: the endpoint is https://")
    a = p.parse_args()
    name = a.tag or a.protocol
    if a.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.exporter import Compression

        credentials = None
        if a.ca:
            import grpc

            with open(a.ca, "rb") as f:
                credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        exporter = OTLPLogExporter(
            endpoint=a.endpoint,
            insecure=a.ca is None,
            credentials=credentials,
            compression=Compression.Gzip if a.gzip else Compression.NoCompression,
        )
    elif a.protocol == "http":
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

        exporter = OTLPLogExporter(
            endpoint=a.endpoint,
            certificate_file=a.ca,
            compression=Compression.Gzip if a.gzip else Compression.NoCompression,
        )
    else:
        exporter = JsonExporter(a.endpoint, a.gzip)
    provider = LoggerProvider(
        resource=Resource.create({"service.name": "otlp-test", "host.name": "sdk-host"})
    )
    exporter = Checked(exporter)
    provider.add_log_record_processor(
        BatchLogRecordProcessor(
            exporter, max_export_batch_size=500, max_queue_size=max(a.count + 1, 2048)
        )
    )
    logger = provider.get_logger("loghaul.test", "1.0")
    for i in range(a.count):
        warn = i % 2 == 0
        logger.emit(
            LogRecord(
                timestamp=BASE + i * 1_000_003 + 7,
                observed_timestamp=BASE + i,
                severity_number=SeverityNumber.WARN if warn else SeverityNumber.ERROR,
                severity_text="WARN" if warn else "ERROR",
                body=f"{name} {i}",
                attributes={"n": i, "protocol": name, "ok": True, "ratio": 0.25, "tags": ["a", "b"]},
            )
        )
    flushed = provider.force_flush(120_000)
    provider.shutdown()
    if not flushed or exporter.failed or getattr(exporter.inner, "failed", False):
        print("otlp_send: not every record was exported", file=sys.stderr)
        sys.exit(1)
    print(f"otlp_send: exported {a.count} records over {a.protocol}", file=sys.stderr)


if __name__ == "__main__":
    main()
