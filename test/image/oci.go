// Package image checks the container image built from the shipped
// Dockerfile, from its OCI archive (`buildah push … oci-archive:`): the
// configuration and files of every platform, the size, and — in containerd
// with runc — that it runs as 65532 with a read-only root filesystem and
// elects itself leader against a real API server with in-cluster
// configuration. `make image-test` builds the archive and runs it.
package image

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// OCI image layout and image-spec types, just the fields checked here.
type (
	descriptor struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int64             `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
		Platform    *struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
		} `json:"platform,omitempty"`
	}
	index struct {
		Manifests []descriptor `json:"manifests"`
	}
	manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	imageConfig struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Config       struct {
			User       string            `json:"User"`
			Entrypoint []string          `json:"Entrypoint"`
			Cmd        []string          `json:"Cmd"`
			Env        []string          `json:"Env"`
			Labels     map[string]string `json:"Labels"`
		} `json:"config"`
	}
)

// archive is an OCI archive extracted into a directory.
type archive struct {
	dir string
}

// platformImage is one platform's image in the archive.
type platformImage struct {
	platform     string // os/arch, from the index
	manifest     manifest
	manifestSize int64
	config       imageConfig
	files        map[string]*file // by path, without a leading slash
	// compressedSize is what a registry stores and a node pulls: manifest,
	// config and layer blobs. uncompressedSize is the layers unpacked.
	compressedSize, uncompressedSize int64
}

type file struct {
	header *tar.Header
	data   []byte // regular files only
}

func openArchive(tarPath, dir string) (*archive, error) {
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", tarPath, err)
		}
		name := path.Clean(h.Name)
		if strings.HasPrefix(name, "..") || path.IsAbs(name) {
			return nil, fmt.Errorf("%s: unsafe path %q", tarPath, h.Name)
		}
		target := dir + "/" + name
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return nil, err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(path.Dir(target), 0o755); err != nil {
				return nil, err
			}
			out, err := os.Create(target)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(out, tr)
			out.Close()
			if err != nil {
				return nil, err
			}
		}
	}
	return &archive{dir: dir}, nil
}

func (a *archive) blob(digest string) ([]byte, error) {
	algo, hex, ok := strings.Cut(digest, ":")
	if !ok {
		return nil, fmt.Errorf("bad digest %q", digest)
	}
	return os.ReadFile(path.Join(a.dir, "blobs", algo, hex))
}

func (a *archive) json(digest string, into any) error {
	b, err := a.blob(digest)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

// images returns the archive's reference name and the image of every
// platform of its (one) image index.
func (a *archive) images() (refName string, images []*platformImage, err error) {
	var top index
	b, err := os.ReadFile(path.Join(a.dir, "index.json"))
	if err != nil {
		return "", nil, err
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return "", nil, err
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
		return "", nil, fmt.Errorf("index.json: want one image index, got %+v", top.Manifests)
	}
	refName = top.Manifests[0].Annotations["org.opencontainers.image.ref.name"]
	var list index
	if err := a.json(top.Manifests[0].Digest, &list); err != nil {
		return "", nil, err
	}
	for _, d := range list.Manifests {
		if d.Platform == nil {
			return "", nil, fmt.Errorf("manifest %s has no platform", d.Digest)
		}
		img := &platformImage{platform: d.Platform.OS + "/" + d.Platform.Architecture, manifestSize: d.Size, files: map[string]*file{}}
		if err := a.json(d.Digest, &img.manifest); err != nil {
			return "", nil, err
		}
		if err := a.json(img.manifest.Config.Digest, &img.config); err != nil {
			return "", nil, err
		}
		img.compressedSize = d.Size + img.manifest.Config.Size
		for _, l := range img.manifest.Layers {
			img.compressedSize += l.Size
			n, err := a.readLayer(l, img.files)
			if err != nil {
				return "", nil, fmt.Errorf("%s layer %s: %w", img.platform, l.Digest, err)
			}
			img.uncompressedSize += n
		}
		images = append(images, img)
	}
	return refName, images, nil
}

// readLayer applies one layer to files (whiteouts remove) and returns its
// uncompressed size.
func (a *archive) readLayer(l descriptor, files map[string]*file) (int64, error) {
	algo, hex, _ := strings.Cut(l.Digest, ":")
	f, err := os.Open(path.Join(a.dir, "blobs", algo, hex))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var r io.Reader = f
	switch l.MediaType {
	case "application/vnd.oci.image.layer.v1.tar+gzip":
		gz, err := gzip.NewReader(f)
		if err != nil {
			return 0, err
		}
		r = gz
	case "application/vnd.oci.image.layer.v1.tar":
	default:
		return 0, fmt.Errorf("unexpected layer media type %q", l.MediaType)
	}
	counted := &countingReader{r: r}
	tr := tar.NewReader(counted)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		dir, base := path.Split(name)
		if strings.HasPrefix(base, ".wh.") {
			delete(files, dir+strings.TrimPrefix(base, ".wh."))
			continue
		}
		entry := &file{header: h}
		if h.Typeflag == tar.TypeReg {
			if entry.data, err = io.ReadAll(tr); err != nil {
				return 0, err
			}
		}
		files[name] = entry
	}
	// The rest of the stream (tar padding) counts too.
	if _, err := io.Copy(io.Discard, counted); err != nil {
		return 0, err
	}
	return counted.n, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
