package trust

import (
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

// CoreDataConverter is client.Options.DataConverter for core-api.
func CoreDataConverter(c *Codec) converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)
}

// NodeDataConverter is client.Options.DataConverter for a node agent. On
// top of the codec it refuses a call that carries fewer payloads than the
// function has arguments: the SDK would otherwise fill the missing ones
// with zero values without the codec ever seeing a payload, so an
// unsigned Reconcile with no input would run as Reconcile(nil) and
// remove every unit of the node.
func NodeDataConverter(c *Codec) converter.DataConverter {
	return allArgs{converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), c)}
}

type allArgs struct{ converter.DataConverter }

var _ converter.DataConverterWithSerializationContext = allArgs{}

// FromPayloads requires one payload per value.
func (a allArgs) FromPayloads(payloads *commonpb.Payloads, valuePtrs ...any) error {
	if n := len(payloads.GetPayloads()); n < len(valuePtrs) {
		return fmt.Errorf("trust: refused input: %d signed payloads for %d arguments: %w", n, len(valuePtrs), ErrUnsigned)
	}
	return a.DataConverter.FromPayloads(payloads, valuePtrs...)
}

// WithSerializationContext keeps the check on the context-bound converter
// the SDK derives for each activity task.
func (a allArgs) WithSerializationContext(sc converter.SerializationContext) converter.DataConverter {
	return allArgs{converter.WithDataConverterSerializationContext(a.DataConverter, sc)}
}
