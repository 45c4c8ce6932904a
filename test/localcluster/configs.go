package localcluster

import (
	"bytes"
	"embed"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"text/template"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

var templates = template.Must(template.New("").Option("missingkey=error").ParseFS(templateFS, "templates/*.tmpl"))

// tmplData is what the templates see: the cluster plus the fixed names.
type tmplData struct {
	*Cluster
	NodeName, PodSubnet, Bridge, NftTable, KubernetesSvcIP string
}

func (c *Cluster) data() tmplData {
	return tmplData{Cluster: c, NodeName: NodeName, PodSubnet: PodSubnet, Bridge: Bridge, NftTable: NftTable, KubernetesSvcIP: KubernetesSvcIP}
}

// Render executes the template name (a file in templates/, without .tmpl) with data.
func Render(name string, data any) ([]byte, error) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name+".tmpl", data); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return b.Bytes(), nil
}

// ConfigFile is one rendered file and where it goes.
type ConfigFile struct {
	Path    string
	Content []byte
	Mode    os.FileMode
}

// Configs renders the CNI network, containerd's and the kubelet's configuration, the DNAT ruleset
// and the env file.
func (c *Cluster) Configs() ([]ConfigFile, error) {
	files := []struct{ tmpl, path string }{
		{"10-elector.conflist", filepath.Join(c.Data, "cni", "net.d", "10-elector.conflist")},
		{"containerd.toml", filepath.Join(c.Etc, "containerd.toml")},
		{"kubelet.yaml", filepath.Join(c.Etc, "kubelet.yaml")},
		{"dnat.nft", filepath.Join(c.Etc, "dnat.nft")},
		{"cluster.env", c.EnvFile},
	}
	var out []ConfigFile
	for _, f := range files {
		b, err := Render(f.tmpl, c.data())
		if err != nil {
			return nil, err
		}
		out = append(out, ConfigFile{Path: f.path, Content: b, Mode: 0o644})
	}
	return out, nil
}

// kubeconfigUsers maps each kubeconfig the cluster writes to the client certificate it uses.
func (c *Cluster) kubeconfigUsers() []struct{ Path, User string } {
	return []struct{ Path, User string }{
		{c.Kubeconfig, "admin"},
		{filepath.Join(c.Etc, "kube-controller-manager.kubeconfig"), "kube-controller-manager"},
		{filepath.Join(c.Etc, "kube-scheduler.kubeconfig"), "kube-scheduler"},
		{filepath.Join(c.Etc, "kubelet.kubeconfig"), "kubelet"},
	}
}

// Kubeconfigs renders a kubeconfig (mode 0600) per component from the certificates in c.PKI.
func (c *Cluster) Kubeconfigs() ([]ConfigFile, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(c.PKI, name))
		return base64.StdEncoding.EncodeToString(b), err
	}
	ca, err := read("ca.crt")
	if err != nil {
		return nil, err
	}
	var out []ConfigFile
	for _, k := range c.kubeconfigUsers() {
		cert, err := read(k.User + ".crt")
		if err != nil {
			return nil, err
		}
		key, err := read(k.User + ".key")
		if err != nil {
			return nil, err
		}
		b, err := Render("kubeconfig", map[string]any{"Port": c.Ports.APIServer, "CA": ca, "User": k.User, "Cert": cert, "Key": key})
		if err != nil {
			return nil, err
		}
		out = append(out, ConfigFile{Path: k.Path, Content: b, Mode: 0o600})
	}
	return out, nil
}

// writeFiles writes files, creating their directories.
func writeFiles(files []ConfigFile) error {
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f.Path, f.Content, f.Mode); err != nil {
			return err
		}
		if err := os.Chmod(f.Path, f.Mode); err != nil {
			return err
		}
	}
	return nil
}
