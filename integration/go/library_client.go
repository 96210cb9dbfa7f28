// A Go net/http client as scrapers use it (crawlguard's browser-signal tests): GETs a URL
// over HTTP/2 from a given source address with the given headers (a browser's User-Agent
// among them), trusting a test CA, and prints the response status.
//
//	library_client URL CA.pem SOURCE_IP ["Name: value" ...]
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: library_client URL CA.pem SOURCE_IP [\"Name: value\" ...]")
		os.Exit(2)
	}
	pem, err := os.ReadFile(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(os.Args[3])}, Timeout: 10 * time.Second}
	client := &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:       dialer.DialContext,
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			ForceAttemptHTTP2: true,
		},
	}
	req, err := http.NewRequest("GET", os.Args[1], nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, h := range os.Args[4:] {
		name, value, _ := strings.Cut(h, ":")
		req.Header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
}
