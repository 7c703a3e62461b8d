package lockgate_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	lockgatev1 "github.com/lockgate/lockgate/clients/go/gen/lockgate/v1"
	"github.com/lockgate/lockgate/clients/go/lockgate"
)

// These tests need no testbed: in-process coordinators scripted to answer as a follower, a
// flaky leader or a server that checks credentials.

// scriptedCoordinator answers PausePipeline: as a follower (UNAVAILABLE + lockgate-leader)
// when leader is set, else failing the first failures calls with a bare UNAVAILABLE; it
// records every request_id and authorization header it saw.
type scriptedCoordinator struct {
	lockgatev1.UnimplementedCoordinatorServiceServer
	leader   string
	failures int

	mu         sync.Mutex
	requestIDs []string
	authz      []string
}

func (s *scriptedCoordinator) PausePipeline(ctx context.Context, request *lockgatev1.PausePipelineRequest) (*lockgatev1.PausePipelineResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requestIDs = append(s.requestIDs, request.GetRequestId())
	md, _ := metadata.FromIncomingContext(ctx)
	s.authz = append(s.authz, md.Get("authorization")...)
	if s.leader != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(lockgate.LeaderMetadataKey, s.leader))
		return nil, status.Error(codes.Unavailable, "not the leader")
	}
	if s.failures > 0 {
		s.failures--
		return nil, status.Error(codes.Unavailable, "database unreachable")
	}
	return &lockgatev1.PausePipelineResponse{Pipeline: &lockgatev1.Pipeline{Name: request.GetName()}}, nil
}

func (s *scriptedCoordinator) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requestIDs...)
}

// serve runs coordinator on a loopback port (with TLS when creds is set) until the test ends.
func serve(t *testing.T, coordinator *scriptedCoordinator, opts ...grpc.ServerOption) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer(opts...)
	lockgatev1.RegisterCoordinatorServiceServer(server, coordinator)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	return listener.Addr().String()
}

func TestFollowsLeaderAndKeepsRequestIDAcrossRetries(t *testing.T) {
	leader := &scriptedCoordinator{failures: 1}
	leaderAddr := serve(t, leader)
	follower := &scriptedCoordinator{leader: leaderAddr}
	client := dialCoordinatorAt(t, serve(t, follower))

	request := &lockgatev1.PausePipelineRequest{Name: "p"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := client.PausePipeline(ctx, request); err != nil {
		t.Fatalf("PausePipeline through a follower and a flaky leader: %v", err)
	}
	// follower -> leader (UNAVAILABLE) -> backoff -> first seed (the follower) -> leader.
	calls := append(follower.seen(), leader.seen()...)
	if len(calls) != 4 || calls[0] == "" {
		t.Fatalf("request ids seen: %q, want 4 attempts with one id", calls)
	}
	for _, id := range calls {
		if id != calls[0] {
			t.Fatalf("request ids seen: %q, want the same id on every attempt", calls)
		}
	}
	if request.GetRequestId() != "" {
		t.Fatalf("the caller's request was changed: request_id %q", request.GetRequestId())
	}
	if got := client.Conn.CurrentAddress(); got != leaderAddr {
		t.Fatalf("calls now go to %s, want the leader %s", got, leaderAddr)
	}
	if _, err := client.PausePipeline(ctx, request); err != nil {
		t.Fatal(err)
	}
	ids := leader.seen()
	if last := ids[len(ids)-1]; last == calls[0] || last == "" {
		t.Fatalf("a second logical call reused request id %q", last)
	}
	if len(follower.seen()) != 2 {
		t.Fatalf("the second call went through the follower again: %q", follower.seen())
	}
}

func TestUnavailableSurfacesBeforeTheDeadline(t *testing.T) {
	// Nothing listens on a closed port: every attempt is UNAVAILABLE.
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := listener.Addr().String()
	_ = listener.Close()
	client := dialCoordinatorAt(t, dead)

	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err = client.PausePipeline(ctx, &lockgatev1.PausePipelineRequest{Name: "p"})
	if lerr := asLockgateError(t, err); lerr.Code != codes.Unavailable {
		t.Fatalf("a call to a dead address: %v, want UNAVAILABLE (the last attempt's error)", err)
	}
	if elapsed := time.Since(began); elapsed < 700*time.Millisecond || elapsed > 1500*time.Millisecond {
		t.Fatalf("gave up after %s: want retries (100+200+400 ms of backoff) ending before the 1.5 s deadline", elapsed)
	}

	// Without a deadline: RetryPolicy.MaxAttempts attempts.
	_, err = client.PausePipeline(context.Background(), &lockgatev1.PausePipelineRequest{Name: "p"})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a call without a deadline to a dead address: %v, want UNAVAILABLE", err)
	}
}

func TestBearerTokenNeedsTLS(t *testing.T) {
	_, err := lockgate.Dial(context.Background(), []string{"127.0.0.1:1"}, lockgate.WithBearerToken("secret"))
	if err == nil || !strings.Contains(err.Error(), "WithTLS") {
		t.Fatalf("Dial with a bearer token and no TLS: %v, want a refusal naming WithTLS", err)
	}
	if _, err := lockgate.Dial(context.Background(), []string{"no-port"}); err == nil {
		t.Fatal("Dial of an address without a port succeeded")
	}
}

func TestTLSAndBearerToken(t *testing.T) {
	certificate, pool := selfSigned(t)
	coordinator := &scriptedCoordinator{}
	addr := serve(t, coordinator, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{certificate}})))
	client, err := lockgate.Dial(context.Background(), []string{addr},
		lockgate.WithTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}), lockgate.WithBearerToken("secret"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	if _, err := client.PausePipeline(callCtx(t), &lockgatev1.PausePipelineRequest{Name: "p"}); err != nil {
		t.Fatalf("PausePipeline over TLS: %v", err)
	}
	if got := coordinator.authz; len(got) != 1 || got[0] != "Bearer secret" {
		t.Fatalf("the server saw authorization %q", got)
	}

	plain := dialCoordinatorAt(t, addr) // plaintext to a TLS server fails, as UNAVAILABLE
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var lerr *lockgate.Error
	if _, err := plain.PausePipeline(ctx, &lockgatev1.PausePipelineRequest{Name: "p"}); !errors.As(err, &lerr) {
		t.Fatalf("plaintext call to a TLS server: %v", err)
	}
}

// selfSigned is a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lockgate-test"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(parsed)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}
