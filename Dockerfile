# Static, non-root image of the operator: `docker build -t cache-operator:dev .`
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /cache-operator .

FROM gcr.io/distroless/static:nonroot
COPY --from=build /cache-operator /cache-operator
USER 65532:65532
ENTRYPOINT ["/cache-operator"]
