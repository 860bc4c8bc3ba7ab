package trust

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// ClientTLS is the mutual TLS configuration of a Temporal client (core or
// node): it presents certFile/keyFile and trusts only servers whose
// certificate chains to caFile, not the system roots.
func ClientTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("client tls: load key pair: %w", err)
	}
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("client tls: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

func loadPool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA %s: no PEM certificate", caFile)
	}
	return pool, nil
}
