package processor_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/inorder-dev/inorder/processor"
)

// iamToken stands for the token function of the cloud's SDK, which the application brings (inorder does
// not depend on it). For RDS it is, from github.com/aws/aws-sdk-go-v2/feature/rds/auth:
//
//	auth.BuildAuthToken(ctx, endpoint, region, user, awsCfg.Credentials)
//
// and for Cloud SQL the cloudsqlconn dialer's IAM login does the same. A token lives 15 minutes; it is
// asked for at each connection, so a connection opened later (after a failover, a lost connection, the
// pool growing) always gets a fresh one.
var iamToken = func(ctx context.Context, endpoint, region, user string) (string, error) {
	return "", errors.New("bring the SDK's token function")
}

// ExampleClientConfig_beforeConnectFunc connects with an IAM token made for each connection: a
// BeforeConnectFunc sets the password of the connection about to be made. Every connection of the client
// goes through it (the session, the pool, and what the pool makes for the listener; the probe and the
// metrics borrow from the pool, see Client.Pool). Should the token service fail for a while, the
// processors wait it out as an outage, once they have connected.
func ExampleClientConfig_beforeConnectFunc() {
	// No password in the URL; TLS verified against the provider's CA bundle.
	cc, err := pgx.ParseConfig("postgres://app@mydb.abc123.eu-west-1.rds.amazonaws.com:5432/shop" +
		"?sslmode=verify-full&sslrootcert=/etc/ssl/certs/rds-global-bundle.pem")
	if err != nil {
		panic(err)
	}
	token := func(ctx context.Context, cc *pgx.ConnConfig) error {
		endpoint := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
		t, err := iamToken(ctx, endpoint, "eu-west-1", cc.User)
		if err != nil {
			return fmt.Errorf("IAM token for %s: %w", cc.User, err)
		}
		cc.Password = t
		return nil
	}
	client, err := processor.NewClient(processor.ClientConfig{ConnConfig: cc, BeforeConnectFunc: token})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	// Add the processors (processor.Config{Client: client, ...}) and run the client, as without tokens.
}
