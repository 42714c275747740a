package common

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash"
	"log"
	"os"
	"strconv"
	"strings"
)

// Security is EOS_SECURITY, set by the runner's --secure (see ../../copier_common.py):
// nil when the copier connects in plaintext.
type Security struct {
	Protocol  string `json:"protocol"`
	Mechanism string `json:"mechanism"`
	Username  string `json:"username"`
	Password  string `json:"password"`
	CAFile    string `json:"cafile"`
	CertFile  string `json:"certfile"`
	KeyFile   string `json:"keyfile"`
}

func LoadSecurity() *Security {
	text := os.Getenv("EOS_SECURITY")
	if text == "" {
		return nil
	}
	s := &Security{}
	if err := json.Unmarshal([]byte(text), s); err != nil {
		log.Fatalf("EOS_SECURITY: %v", err)
	}
	return s
}

// TLSConfig trusts only the CA in CAFile (the broker's name is checked by the client)
// and presents CertFile with KeyFile when the mode has a client certificate; nil: no TLS.
func (s *Security) TLSConfig() *tls.Config {
	if s.CAFile == "" {
		return nil
	}
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		log.Fatalf("EOS_SECURITY cafile: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		log.Fatalf("EOS_SECURITY cafile %s: no certificate", s.CAFile)
	}
	config := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if s.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
		if err != nil {
			log.Fatalf("EOS_SECURITY certfile/keyfile: %v", err)
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config
}

// ScramClient is the client side of SCRAM-SHA-256/512 (RFC 5802) with the standard
// library only, for sarama (its SCRAMClient interface: Begin, Step, Done).
type ScramClient struct {
	hash                     func() hash.Hash
	user, pass, nonce, first string
	serverSignature          string
	step                     int
	done                     bool
}

func NewScramClient(mechanism string) *ScramClient {
	if mechanism == "SCRAM-SHA-256" {
		return &ScramClient{hash: sha256.New}
	}
	return &ScramClient{hash: sha512.New}
}

func (c *ScramClient) Begin(user, pass, _ string) error {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	c.user, c.pass, c.nonce, c.step, c.done = user, pass, base64.RawStdEncoding.EncodeToString(b), 0, false
	return nil
}

func (c *ScramClient) mac(key []byte, text string) []byte {
	m := hmac.New(c.hash, key)
	m.Write([]byte(text))
	return m.Sum(nil)
}

func (c *ScramClient) Step(challenge string) (string, error) {
	c.step++
	switch c.step {
	case 1: // client-first
		name := strings.NewReplacer("=", "=3D", ",", "=2C").Replace(c.user)
		c.first = "n=" + name + ",r=" + c.nonce
		return "n,," + c.first, nil
	case 2: // server-first -> client-final
		attrs := map[string]string{}
		for _, kv := range strings.Split(challenge, ",") {
			if len(kv) > 2 && kv[1] == '=' {
				attrs[kv[:1]] = kv[2:]
			}
		}
		salt, err := base64.StdEncoding.DecodeString(attrs["s"])
		iterations, err2 := strconv.Atoi(attrs["i"])
		if err != nil || err2 != nil || !strings.HasPrefix(attrs["r"], c.nonce) {
			return "", fmt.Errorf("SCRAM: bad server-first message %q", challenge)
		}
		salted, err := pbkdf2.Key(c.hash, c.pass, salt, iterations, c.hash().Size())
		if err != nil {
			return "", err
		}
		clientKey := c.mac(salted, "Client Key")
		h := c.hash()
		h.Write(clientKey)
		withoutProof := "c=biws,r=" + attrs["r"]
		auth := c.first + "," + challenge + "," + withoutProof
		signature := c.mac(h.Sum(nil), auth)
		for i := range clientKey {
			clientKey[i] ^= signature[i]
		}
		c.serverSignature = base64.StdEncoding.EncodeToString(c.mac(c.mac(salted, "Server Key"), auth))
		return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(clientKey), nil
	default: // server-final
		if challenge != "v="+c.serverSignature {
			return "", fmt.Errorf("SCRAM: the server's signature does not verify: %q", challenge)
		}
		c.done = true
		return "", nil
	}
}

func (c *ScramClient) Done() bool { return c.done }
