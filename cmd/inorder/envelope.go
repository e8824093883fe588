package main

import (
	"flag"

	"github.com/inorder-dev/inorder/handlers/cloudevent"
)

// envelopeFlags are the flags that wrap each record in a standard envelope: --envelope and its options.
type envelopeFlags struct {
	envelope string
	mode     string
	source   string
	typ      string
}

// envelopeHandlers are the handlers that can send a CloudEvent.
const envelopeHandlers = "webhook, kafka, pubsub, nats, rabbitmq or redis"

func (e *envelopeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&e.envelope, "envelope", "none", "wrap each record in a standard envelope: none (the handler's own format) "+
		"or cloudevents (CloudEvents 1.0, for "+envelopeHandlers+")")
	fs.StringVar(&e.mode, "envelope-mode", "", "cloudevents: binary (attributes as headers, the payload as the body) or "+
		"structured (the whole event as the body, application/cloudevents+json) (default binary; structured for nats and redis, "+
		"which carry no other)")
	fs.StringVar(&e.source, "ce-source", "", "cloudevents: every event's source, a URI reference (default inorder://<process>)")
	fs.StringVar(&e.typ, "ce-type", cloudevent.DefaultType, "cloudevents: the type of an event whose record has no type column or NULL in it")
}

// set reports whether an option of --envelope cloudevents was given.
func (e *envelopeFlags) set() bool {
	return e.mode != "" || e.source != "" || e.typ != cloudevent.DefaultType
}

// build returns the envelope the flags ask for handler, nil for none.
func (e *envelopeFlags) build(handler string) (*cloudevent.Envelope, error) {
	switch e.envelope {
	case "none":
		if e.set() {
			return nil, usageErr("--envelope-mode, --ce-source and --ce-type need --envelope cloudevents")
		}
		return nil, nil
	case "cloudevents":
	default:
		return nil, usageErr("--envelope must be none or cloudevents, got %q", e.envelope)
	}
	mode := cloudevent.Mode(e.mode)
	switch handler {
	case "webhook", "kafka", "pubsub", "rabbitmq":
	case "nats", "redis":
		if mode == cloudevent.Binary {
			why := "the CloudEvents NATS binding defines the structured mode only"
			if handler == "redis" {
				why = "CloudEvents has no Redis binding, and a stream entry carries the structured mode only"
			}
			return nil, usageErr("--envelope-mode binary: %s; use --envelope-mode structured with --handler %s", why, handler)
		}
		if mode == "" {
			mode = cloudevent.Structured
		}
	default:
		return nil, usageErr("--envelope cloudevents needs --handler %s, not %s", envelopeHandlers, handler)
	}
	if mode != "" && mode != cloudevent.Binary && mode != cloudevent.Structured {
		return nil, usageErr("--envelope-mode must be binary or structured, got %q", e.mode)
	}
	env, err := cloudevent.New(cloudevent.Config{Mode: mode, Source: e.source, Type: e.typ})
	if err != nil {
		return nil, usageErr("--ce-source: %v", err)
	}
	return env, nil
}
