package webhook

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Header names of the Standard Webhooks scheme (SignatureStandardWebhooks), as the specification names
// them: its libraries read them. HTTP header names are case-insensitive; the specification writes them in
// lower case.
const (
	// standardIDHeader carries the message id, which the handler makes the idempotency key,
	// <process>:<record id>: the same on every delivery of a record.
	standardIDHeader = "webhook-id"
	// standardTimestampHeader carries the Unix time, in seconds, the request was signed at.
	standardTimestampHeader = "webhook-timestamp"
	// standardSignatureHeader carries v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">.
	standardSignatureHeader = "webhook-signature"
)

// standardSecretPrefix marks a Standard Webhooks secret: the rest is the key, in base64.
const standardSecretPrefix = "whsec_"

// standardKey returns the HMAC key of a Standard Webhooks secret: the base64 after whsec_ decoded, as the
// specification's libraries do, or any other secret as it is.
func standardKey(secret []byte) ([]byte, error) {
	rest, ok := strings.CutPrefix(string(secret), standardSecretPrefix)
	if !ok {
		return secret, nil
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, errors.New("webhook: Config.Secret starts with whsec_ but the rest is not standard base64")
	}
	if len(key) == 0 {
		return nil, errors.New("webhook: Config.Secret is whsec_ with no key after it")
	}
	return key, nil
}

// signStandard returns the webhook-timestamp and webhook-signature values for a message of id with body,
// signed with key at time t: the HMAC of "<id>.<timestamp>.<body>".
func signStandard(key []byte, id string, t time.Time, body []byte) (timestamp, signature string) {
	timestamp = strconv.FormatInt(t.Unix(), 10)
	return timestamp, "v1," + base64.StdEncoding.EncodeToString(mac(key, id+"."+timestamp, body))
}
