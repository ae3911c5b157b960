package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki holds the paths of the key material the control plane is started with.
// It is generated once per ControlPlane, so a restarted apiserver serves the
// same certificate and still accepts the service-account tokens it issued.
type pki struct {
	caPEM      []byte // the CA clients trust
	caFile     string
	certFile   string // apiserver serving certificate, signed by the CA
	keyFile    string
	saKeyFile  string // RSA private key that signs service-account tokens
	saPubFile  string // its public key, which verifies them
	tokenFile  string // static token file holding the admin token
	adminToken string
}

// adminUser is the static-token user; system:masters bypasses RBAC.
const (
	adminUser  = "test-admin"
	adminGroup = "system:masters"
)

// newPKI writes the key material into dir. The serving certificate is valid
// for loopback, plus extraIPs and extraNames (a node's address and the
// in-cluster names of the "kubernetes" Service, see Options.NodeAddress).
func newPKI(dir string, extraIPs []net.IP, extraNames []string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	p := &pki{
		caFile:    filepath.Join(dir, "ca.crt"),
		certFile:  filepath.Join(dir, "apiserver.crt"),
		keyFile:   filepath.Join(dir, "apiserver.key"),
		saKeyFile: filepath.Join(dir, "sa.key"),
		saPubFile: filepath.Join(dir, "sa.pub"),
		tokenFile: filepath.Join(dir, "tokens.csv"),
	}
	if err := p.writeServing(extraIPs, extraNames); err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	if err := p.writeServiceAccountKey(); err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	if err := p.writeTokenFile(); err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	return p, nil
}

// writeServing creates a throw-away CA and a serving certificate for
// 127.0.0.1/localhost (and the extra names), so clients verify TLS exactly as
// against a real cluster instead of skipping verification.
func (p *pki) writeServing(extraIPs []net.IP, extraNames []string) error {
	now := time.Now()
	// Back-date a little so a client clock slightly behind still accepts it.
	notBefore, notAfter := now.Add(-time.Hour), now.Add(30*24*time.Hour)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "leader-elector test CA"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return fmt.Errorf("creating CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  append([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, extraIPs...),
		DNSNames:     append([]string{"localhost"}, extraNames...),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("creating serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}

	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return writeFiles(map[string][]byte{
		p.caFile:   p.caPEM,
		p.certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		p.keyFile:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	})
}

// writeServiceAccountKey creates the RSA key pair the TokenRequest API signs
// and verifies service-account tokens with.
func (p *pki) writeServiceAccountKey() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return writeFiles(map[string][]byte{
		p.saKeyFile: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		p.saPubFile: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}),
	})
}

// writeTokenFile writes the --token-auth-file: token,user,uid,"groups".
func (p *pki) writeTokenFile() error {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	p.adminToken = hex.EncodeToString(b)
	line := fmt.Sprintf("%s,%s,%s,%q\n", p.adminToken, adminUser, adminUser, adminGroup)
	return writeFiles(map[string][]byte{p.tokenFile: []byte(line)})
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		// crypto/rand does not fail on Linux; a constant serial would still
		// produce a valid (if less unique) certificate.
		return big.NewInt(1)
	}
	return n
}

// writeFiles writes each file owner-only: they hold private keys and tokens.
func writeFiles(files map[string][]byte) error {
	for name, data := range files {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}
