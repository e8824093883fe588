package main

import (
	"flag"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder-dev/inorder/handlers"
	"github.com/inorder-dev/inorder/handlers/cloudevent"
	"github.com/inorder-dev/inorder/handlers/kafka"
	"github.com/inorder-dev/inorder/processor"
)

// Bounds of --kafka-max-message-bytes: franz-go's own limits on a record batch (at most what it writes to
// a broker in one request, 100 MiB by default).
const (
	kafkaMinMessageBytes     = 512
	kafkaMaxMessageBytes     = 100 << 20
	kafkaDefaultMessageBytes = 1_000_012 // franz-go's default, Kafka's max.message.bytes default
)

// kafkaFlags are the flags of `inorder run --handler kafka`.
type kafkaFlags struct {
	envelope        *cloudevent.Envelope // from --envelope, set by runFlags.newHandler
	brokers         string
	topic           string
	topicColumn     string
	payloadColumn   string
	typeColumn      string
	maxInFlight     int
	deliveryTimeout time.Duration
	maxMessageBytes int
}

func (k *kafkaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&k.brokers, "kafka-brokers", "", "kafka: comma-separated seed brokers, host:port")
	fs.StringVar(&k.topic, "kafka-topic", "", "kafka: topic records go to (with --kafka-topic-column: those whose column is NULL or empty)")
	fs.StringVar(&k.topicColumn, "kafka-topic-column", "", "kafka: column holding each record's topic")
	fs.StringVar(&k.payloadColumn, "kafka-payload-column", handlers.DefaultPayloadColumn, "kafka: column sent as the record value (whole record as JSON without it)")
	fs.StringVar(&k.typeColumn, "kafka-type-column", "", "kafka: column sent in the event_type header (default type, else event_type)")
	fs.IntVar(&k.maxInFlight, "kafka-max-in-flight", 1, "kafka: records produced at once, in order per key (records of one key one at a time)")
	fs.DurationVar(&k.deliveryTimeout, "kafka-delivery-timeout", 0, "kafka: how long the client tries to deliver a record, below --handler-timeout (default four fifths of it)")
	fs.IntVar(&k.maxMessageBytes, "kafka-max-message-bytes", kafkaDefaultMessageBytes, "kafka: largest record batch, at most the topic's max.message.bytes; a larger record halts the stream as a poison record")
}

// set reports whether any --kafka-* flag differs from its default.
func (k *kafkaFlags) set() bool {
	return k.brokers != "" || k.topic != "" || k.topicColumn != "" || k.payloadColumn != handlers.DefaultPayloadColumn ||
		k.typeColumn != "" || k.maxInFlight != 1 || k.deliveryTimeout != 0 ||
		k.maxMessageBytes != kafkaDefaultMessageBytes
}

// newHandler checks the flags and returns the Kafka handler and a function that closes its client.
func (k *kafkaFlags) newHandler(cfg processor.Config[handlers.Row]) (handlers.Handler[handlers.Row], func(), error) {
	var brokers []string
	for _, b := range strings.Split(k.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) == 0 {
		return nil, nil, usageErr("--handler kafka needs --kafka-brokers (host:port, comma-separated)")
	}
	if k.topic == "" && k.topicColumn == "" {
		return nil, nil, usageErr("--handler kafka needs --kafka-topic or --kafka-topic-column")
	}
	if k.maxInFlight < 1 {
		return nil, nil, usageErr("--kafka-max-in-flight must be at least 1, got %d", k.maxInFlight)
	}
	bound := handlerTimeout(cfg)
	k.deliveryTimeout = sinkTimeout(k.deliveryTimeout, bound)
	if k.deliveryTimeout < time.Second || k.deliveryTimeout >= bound {
		return nil, nil, usageErr("--kafka-delivery-timeout (%s) must be at least 1s and shorter than the handler "+
			"timeout (%s: --handler-timeout, by default the smaller of half --idle-timeout and a third of --lease)",
			k.deliveryTimeout, bound)
	}
	if k.maxMessageBytes < kafkaMinMessageBytes || k.maxMessageBytes > kafkaMaxMessageBytes {
		return nil, nil, usageErr("--kafka-max-message-bytes must be between %d and %d, got %d",
			kafkaMinMessageBytes, kafkaMaxMessageBytes, k.maxMessageBytes)
	}
	client, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ClientID("inorder"),
		kgo.RecordDeliveryTimeout(k.deliveryTimeout),
		kgo.ProducerBatchMaxBytes(int32(k.maxMessageBytes)),
		// A missing topic is looked for a few times, once per MetadataMinAge at most: a halt in seconds.
		kgo.MetadataMinAge(time.Second),
	)
	if err != nil {
		return nil, nil, usageErr("--kafka-brokers: %v", err)
	}
	h, err := kafka.New(kafka.Config{Client: client, Topic: k.topic, TopicColumn: k.topicColumn,
		PayloadColumn: namedColumn(k.payloadColumn, handlers.DefaultPayloadColumn), TypeColumn: k.typeColumn,
		Envelope: k.envelope})
	if err != nil {
		client.Close()
		return nil, nil, usageErr("%v", err)
	}
	return h, client.Close, nil
}
