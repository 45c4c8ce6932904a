package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certSpec is one key pair signed by the cluster CA, written as PKI/Name.crt and PKI/Name.key.
type certSpec struct {
	Name string
	CN   string
	Org  string
	Use  x509.ExtKeyUsage
	IPs  []string
	DNS  []string
}

// certSpecs are the certificates the cluster needs (the CA itself and the service-account key pair
// are made separately).
func (c *Cluster) certSpecs() []certSpec {
	return []certSpec{
		{Name: "apiserver", CN: "kube-apiserver", Use: x509.ExtKeyUsageServerAuth,
			IPs: []string{"127.0.0.1", c.NodeIP, KubernetesSvcIP},
			DNS: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{Name: "apiserver-kubelet-client", CN: "kube-apiserver-kubelet-client", Org: "system:masters", Use: x509.ExtKeyUsageClientAuth},
		{Name: "admin", CN: "elector-admin", Org: "system:masters", Use: x509.ExtKeyUsageClientAuth},
		{Name: "kube-controller-manager", CN: "system:kube-controller-manager", Use: x509.ExtKeyUsageClientAuth},
		{Name: "kube-scheduler", CN: "system:kube-scheduler", Use: x509.ExtKeyUsageClientAuth},
		{Name: "kubelet", CN: "system:node:" + NodeName, Org: "system:nodes", Use: x509.ExtKeyUsageClientAuth},
		{Name: "kubelet-serving", CN: "system:node:" + NodeName, Org: "system:nodes", Use: x509.ExtKeyUsageServerAuth,
			IPs: []string{c.NodeIP, "127.0.0.1"}, DNS: []string{NodeName, "localhost"}},
	}
}

// WritePKI writes the CA (ca.crt/ca.key), every certificate of certSpecs and the service-account
// key pair (sa.key/sa.pub) into dir (mode 0700; keys 0600). Keys are ECDSA P-256.
func (c *Cluster) WritePKI(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "elector-sidecar-local-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	caDER, ca, err := sign(caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	if err := writePair(dir, "ca", caDER, caKey); err != nil {
		return err
	}
	for _, s := range c.certSpecs() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			Subject:               pkix.Name{CommonName: s.CN},
			NotBefore:             now.Add(-time.Hour),
			NotAfter:              now.AddDate(10, 0, 0),
			BasicConstraintsValid: true,
			KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:           []x509.ExtKeyUsage{s.Use},
			DNSNames:              s.DNS,
		}
		if s.Org != "" {
			tmpl.Subject.Organization = []string{s.Org}
		}
		for _, ip := range s.IPs {
			parsed := net.ParseIP(ip)
			if parsed == nil {
				return fmt.Errorf("certificate %s: bad IP %q", s.Name, ip)
			}
			tmpl.IPAddresses = append(tmpl.IPAddresses, parsed)
		}
		der, _, err := sign(tmpl, ca, key.Public(), caKey)
		if err != nil {
			return fmt.Errorf("certificate %s: %w", s.Name, err)
		}
		if err := writePair(dir, s.Name, der, key); err != nil {
			return err
		}
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(filepath.Join(dir, "sa.key"), saKey); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return der, cert, err
}

func writePair(dir, name string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeKey(filepath.Join(dir, name+".key"), key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}
