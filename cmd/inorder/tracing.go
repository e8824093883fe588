package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracerProvider returns where the spans of a run go: an OTLP exporter when the standard environment asks
// for one (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set, OTEL_SDK_DISABLED not
// true, OTEL_TRACES_EXPORTER otlp or unset), else nil: the global provider, which records nothing, so that
// a run without the variables costs nothing. The exporter reads the rest of its settings (headers, TLS,
// timeout, compression) and the SDK its sampler (OTEL_TRACES_SAMPLER) from the environment themselves.
// The returned function flushes what is buffered and stops the exporter.
func tracerProvider(ctx context.Context, log zerolog.Logger) (trace.TracerProvider, func(), error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, func() {}, nil
	}
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, func() {}, nil
	}
	switch exp := os.Getenv("OTEL_TRACES_EXPORTER"); exp {
	case "", "otlp":
	case "none":
		return nil, func() {}, nil
	default:
		return nil, nil, usageErr("OTEL_TRACES_EXPORTER=%q: inorder exports traces with otlp only (or none)", exp)
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exporter sdktrace.SpanExporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		protocol = "http/protobuf"
		exporter, err = otlptracehttp.New(ctx)
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	default:
		return nil, nil, usageErr("OTEL_EXPORTER_OTLP_PROTOCOL=%q: inorder exports traces over http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// The service is "inorder" unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise.
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", "inorder")), resource.Environment())
	if err != nil {
		return nil, nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	res, _ = resource.Merge(resource.Default(), res)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	log.Info().Str("protocol", protocol).Msg("exporting traces with OTLP")
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn().Err(err).Msg("could not send the last traces")
		}
	}, nil
}
