// otelcol-loghaul: a custom OpenTelemetry Collector distribution for loghaul's bench and tests, the
// peer that speaks OTLP, syslog, Fluent Forward and file logs. It is the program that the Collector's
// builder (ocb) would generate for the components listed below, written by hand so that no builder is
// needed: scripts/install-peers.sh builds it with `go build -mod=readonly` from go.mod and the
// committed go.sum into $PEERS_DIR/otelcol/otelcol-loghaul. See README.md beside this file.
package main

import (
	"log"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/receiver/filelogreceiver"
	"github.com/open-telemetry/opentelemetry-collector-contrib/receiver/fluentforwardreceiver"
	"github.com/open-telemetry/opentelemetry-collector-contrib/receiver/syslogreceiver"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/exporter/otlphttpexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor/batchprocessor"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

const (
	core    = "go.opentelemetry.io/collector/"
	contrib = "github.com/open-telemetry/opentelemetry-collector-contrib/"
)

// components lists the factories, and the module of each for `otelcol-loghaul components`.
func components() (otelcol.Factories, error) {
	var err error
	f := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	if f.Receivers, err = otelcol.MakeFactoryMap(otlpreceiver.NewFactory(), syslogreceiver.NewFactory(),
		filelogreceiver.NewFactory(), fluentforwardreceiver.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	if f.Processors, err = otelcol.MakeFactoryMap(batchprocessor.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	if f.Exporters, err = otelcol.MakeFactoryMap(otlphttpexporter.NewFactory(), otlpexporter.NewFactory(),
		debugexporter.NewFactory(), fileexporter.NewFactory()); err != nil {
		return otelcol.Factories{}, err
	}
	f.ReceiverModules = map[component.Type]string{
		otlpreceiver.NewFactory().Type():          core + "receiver/otlpreceiver v0.165.0",
		syslogreceiver.NewFactory().Type():        contrib + "receiver/syslogreceiver v0.165.1",
		filelogreceiver.NewFactory().Type():       contrib + "receiver/filelogreceiver v0.165.1",
		fluentforwardreceiver.NewFactory().Type(): contrib + "receiver/fluentforwardreceiver v0.165.1",
	}
	f.ProcessorModules = map[component.Type]string{
		batchprocessor.NewFactory().Type(): core + "processor/batchprocessor v0.165.0",
	}
	f.ExporterModules = map[component.Type]string{
		otlphttpexporter.NewFactory().Type(): core + "exporter/otlphttpexporter v0.165.0",
		otlpexporter.NewFactory().Type():     core + "exporter/otlpexporter v0.165.0",
		debugexporter.NewFactory().Type():    core + "exporter/debugexporter v0.165.0",
		fileexporter.NewFactory().Type():     contrib + "exporter/fileexporter v0.165.1",
	}
	return f, nil
}

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "otelcol-loghaul",
			Description: "OpenTelemetry Collector distribution for loghaul's bench and tests",
			Version:     "0.165.0-loghaul",
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{envprovider.NewFactory(), fileprovider.NewFactory()},
				DefaultScheme:     "env",
			},
		},
		ProviderModules: map[string]string{
			envprovider.NewFactory().Create(confmap.ProviderSettings{}).Scheme():  core + "confmap/provider/envprovider v1.71.0",
			fileprovider.NewFactory().Create(confmap.ProviderSettings{}).Scheme(): core + "confmap/provider/fileprovider v1.71.0",
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		log.Fatalf("collector server run finished with error: %v", err)
	}
}
